#!/bin/sh
# The pod network of the locally built kind node image (kindnetd is on no reachable registry):
# writes this node's CNI config (ptp + host-local on the node's podCIDR) and keeps a route to
# every other node's podCIDR through that node's address. Runs as a DaemonSet on the host
# network; reaches the API server at $CONTROL_PLANE_ENDPOINT (set by kind), because the
# Service network is not up before the pod network is.
set -eu
SA=/var/run/secrets/kubernetes.io/serviceaccount
kc() {
    kubectl --server "https://$CONTROL_PLANE_ENDPOINT" --certificate-authority "$SA/ca.crt" \
        --token "$(cat "$SA/token")" "$@"
}
conf=/etc/cni/net.d/10-ultraplane-ptp.conflist
while true; do
    cidr="$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)"
    if [ -n "$cidr" ]; then
        want="{\"cniVersion\": \"0.4.0\", \"name\": \"ultraplane-kind\", \"plugins\": [{\"type\": \"ptp\", \"ipMasq\": false, \"mtu\": 1500, \"ipam\": {\"type\": \"host-local\", \"dataDir\": \"/run/cni-ipam-state\", \"routes\": [{\"dst\": \"0.0.0.0/0\"}], \"ranges\": [[{\"subnet\": \"$cidr\"}]]}}, {\"type\": \"portmap\", \"capabilities\": {\"portMappings\": true}}]}"
        if [ "$(cat "$conf" 2>/dev/null || true)" != "$want" ]; then
            echo "$want" >"$conf.tmp" && mv "$conf.tmp" "$conf"
            echo "wrote $conf for $cidr"
        fi
    fi
    kc get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' 2>/dev/null \
        | while read -r name podcidr address; do
            [ "$name" = "$NODE_NAME" ] && continue
            [ -n "$podcidr" ] && [ -n "$address" ] || continue
            ip route replace "$podcidr" via "$address"
        done
    sleep 5
done
