// Command runc is a pass-through wrapper in front of the real runc, for hosts that cannot
// grant what a privileged container asks for.
//
// Some virtual machines run with a capability bounding set that lacks capabilities Docker
// requests for `--privileged` (kind runs every node privileged), or forbid any process to set
// a negative oom_score_adj (containerd and kubelet ask for one). runc then refuses to start the
// container. This wrapper edits the OCI runtime spec it is handed, dropping the capabilities
// the host's bounding set lacks, clamping a negative oomScoreAdj to 0 and rlimits to the
// host's hard limits, and then executes the real runc with the same arguments. Where the host
// grants everything, the spec is left byte-for-byte unchanged.
//
// hack/kind-cluster.sh installs it as /usr/local/sbin/runc (found before /usr/sbin/runc on
// PATH) only when it detects one of these restrictions, and puts a copy in its node image.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Capability numbers from linux/capability.h.
var capNumbers = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
	"CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
	"CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11,
	"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
	"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19,
	"CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23,
	"CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27,
	"CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
	"CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
	"CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39,
	"CAP_CHECKPOINT_RESTORE": 40,
}

var rlimitNumbers = map[string]int{
	"RLIMIT_CPU": 0, "RLIMIT_FSIZE": 1, "RLIMIT_DATA": 2, "RLIMIT_STACK": 3, "RLIMIT_CORE": 4,
	"RLIMIT_RSS": 5, "RLIMIT_NPROC": 6, "RLIMIT_NOFILE": 7, "RLIMIT_MEMLOCK": 8, "RLIMIT_AS": 9,
	"RLIMIT_LOCKS": 10, "RLIMIT_SIGPENDING": 11, "RLIMIT_MSGQUEUE": 12, "RLIMIT_NICE": 13,
	"RLIMIT_RTPRIO": 14, "RLIMIT_RTTIME": 15,
}

func boundingSet() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// negativeOOMAllowed says whether this process may lower its oom_score_adj; a successful
// trial is undone at once, before runc starts.
func negativeOOMAllowed() bool {
	f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 16)
	n, _ := f.Read(buf)
	current := strings.TrimSpace(string(buf[:n]))
	if _, err := f.WriteAt([]byte("-1"), 0); err != nil {
		return false
	}
	_, _ = f.WriteAt([]byte(current), 0)
	return true
}

// process edits one OCI process object in place; it reports whether anything changed.
func process(p map[string]any, bounding uint64, haveBounding bool, clampOOM bool) bool {
	changed := false
	if caps, ok := p["capabilities"].(map[string]any); ok && haveBounding {
		for set, raw := range caps {
			list, ok := raw.([]any)
			if !ok {
				continue
			}
			kept := make([]any, 0, len(list))
			for _, c := range list {
				name, _ := c.(string)
				if n, known := capNumbers[name]; known && bounding&(1<<n) == 0 {
					changed = true
					continue
				}
				kept = append(kept, c)
			}
			caps[set] = kept
		}
	}
	if adj, ok := p["oomScoreAdj"].(float64); ok && adj < 0 && clampOOM {
		p["oomScoreAdj"] = 0
		changed = true
	}
	if limits, ok := p["rlimits"].([]any); ok {
		for _, raw := range limits {
			l, ok := raw.(map[string]any)
			if !ok {
				continue
			}
			name, _ := l["type"].(string)
			res, known := rlimitNumbers[name]
			if !known {
				continue
			}
			var host syscall.Rlimit
			if syscall.Getrlimit(res, &host) != nil {
				continue
			}
			for _, key := range []string{"hard", "soft"} {
				if v, ok := l[key].(float64); ok && uint64(v) > host.Max {
					l[key] = host.Max
					changed = true
				}
			}
		}
	}
	return changed
}

func rewrite(path string, isProcess bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	bounding, haveBounding := boundingSet()
	clampOOM := !negativeOOMAllowed()
	p := doc
	if !isProcess {
		inner, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		p = inner
	}
	if !process(p, bounding, haveBounding, clampOOM) {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// specFile finds the spec runc will read: the bundle's config.json for create/run, the
// --process file for exec.
func specFile(args []string) (string, bool) {
	command, bundle, proc := "", "", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() string {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
				return v
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b" || strings.HasPrefix(a, "--bundle="):
			bundle = value()
		case a == "--process" || a == "-p" || strings.HasPrefix(a, "--process="):
			proc = value()
		case a == "--root" || a == "--log" || a == "--log-format" || a == "--criu" ||
			a == "--pid-file" || a == "--console-socket":
			i++ // global or command options with a value
		case command == "" && !strings.HasPrefix(a, "-"):
			command = a
		}
	}
	switch command {
	case "create", "run":
		if bundle == "" {
			bundle = "."
		}
		return filepath.Join(bundle, "config.json"), false
	case "exec":
		if proc != "" {
			return proc, true
		}
	}
	return "", false
}

func realRunc() string {
	if r := os.Getenv("ULTRAPLANE_REAL_RUNC"); r != "" {
		return r
	}
	return "/usr/sbin/runc"
}

func main() {
	if path, isProcess := specFile(os.Args[1:]); path != "" {
		if err := rewrite(path, isProcess); err != nil {
			fmt.Fprintf(os.Stderr, "runc wrapper: cannot adjust %s: %v\n", path, err)
		}
	}
	real := realRunc()
	err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "runc wrapper: cannot execute %s: %v\n", real, err)
	os.Exit(127)
}
