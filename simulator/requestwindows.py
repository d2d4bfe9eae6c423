"""A service's request trace as fixed windows of arrival rate and token mix.

Why windows and not requests: a day of a 1,000 requests/s service is 86 million requests,
and the replay must take seconds, not hours. The serving model (`ultraplane.serving`) is a
fluid one that prices a window from its arrival rate and token mix, so the replay bins the
trace once into windows of `window_s` and never looks at a request again.

Scaling: `rateScale` K makes K independent copies of the trace's users, so a window holds K
times the trace's requests with the same token mix (the mix of the trace's own requests in
it). The shape is kept minute by minute (`SHAPE_S`): a minute's windows share its rate and
mix, arrivals Poisson within it. Looping: the trace repeats from the minute after its last
request (its span plus one mean gap, rounded up to whole minutes), so each loop's windows
are the same windows and their mixes are built once.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ultraplane.serving.mixes import TokenMix

__all__ = ["RequestTrace", "Windows", "load_requests", "windows_of"]

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MAX_ROWS = 20_000_000
# The trace's shape is kept minute by minute; within a minute arrivals are taken as Poisson at
# the minute's rate (K independent copies of its users: Palm-Khintchine), as the serving
# model's fidelity test does.
SHAPE_S = 60.0


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """Arrival times (seconds from the first), prompt and output tokens, one per request."""

    t: npt.NDArray[np.float64]
    prompts: npt.NDArray[np.float64]
    outputs: npt.NDArray[np.float64]

    @property
    def span_s(self) -> float:
        """The trace's span plus one mean gap: when its next loop would begin."""
        n = self.t.size
        span = float(self.t[-1] - self.t[0]) if n else 0.0
        return span + (span / (n - 1) if n > 1 else 1.0)


def _seconds(stamp: str) -> float:
    try:
        return float(stamp)
    except ValueError:
        return datetime.fromisoformat(stamp.strip()[:26]).timestamp()


def load_requests(path: str) -> RequestTrace:
    """The CSV's requests, sorted by arrival. Raises ValueError naming the file and line.
    Read once per version of the file (three policies replay the same trace)."""
    try:
        info = Path(path).stat()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _load(path, info.st_mtime_ns, info.st_size)


@cache
def _load(path: str, mtime_ns: int, size: int) -> RequestTrace:
    times: list[float] = []
    prompts: list[float] = []
    outputs: list[float] = []
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: missing column(s) {', '.join(missing)} "
                                 f"(expected {','.join(COLUMNS)})")
            for line, row in enumerate(reader, start=2):
                try:
                    t = _seconds(row["TIMESTAMP"])
                    p, o = int(row["ContextTokens"]), int(row["GeneratedTokens"])
                except (TypeError, ValueError):
                    raise ValueError(f"{path}:{line}: expected a timestamp and two token "
                                     "counts") from None
                if p < 1 or o < 1 or not math.isfinite(t):
                    raise ValueError(f"{path}:{line}: token counts must be at least 1")
                times.append(t)
                prompts.append(p)
                outputs.append(o)
                if len(times) > MAX_ROWS:
                    raise ValueError(f"{path}: more than {MAX_ROWS:,} requests")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a UTF-8 CSV file") from None
    if not times:
        raise ValueError(f"{path} holds no request")
    order = np.argsort(np.asarray(times), kind="stable")
    arrivals = np.asarray(times, dtype=np.float64)[order]
    return RequestTrace(arrivals - arrivals[0], np.asarray(prompts, dtype=np.float64)[order],
                        np.asarray(outputs, dtype=np.float64)[order])


@dataclass(frozen=True, eq=False)
class Windows:
    """A service's load, window by window from its start: requests (floats: K times the
    trace's), the index of each window's mix in `mixes` (-1: no request), and each window's
    mean output tokens."""

    window_s: float
    requests: npt.NDArray[np.float64]
    mix_index: npt.NDArray[np.intp]
    mixes: tuple[TokenMix, ...]
    mean_output: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.requests.size)


def windows_of(trace: RequestTrace, *, window_s: float, rate_scale: float, loop: bool,
               duration_s: float, shape_s: float = SHAPE_S) -> Windows:
    """Bin `trace` into windows of `window_s` over `duration_s` (a last partial window is
    dropped: a service's figures count whole windows). The trace's shape is kept per
    `shape_s` (a multiple of `window_s`): its windows share their stretch's rate and mix."""
    per_shape = round(shape_s / window_s)
    if per_shape < 1 or abs(per_shape * window_s - shape_s) > 1e-9:
        raise ValueError(f"the shape resolution {shape_s:g} s must be a multiple of the "
                         f"window {window_s:g} s")
    count = int(duration_s // window_s)
    stretches = max(math.ceil(trace.span_s / shape_s - 1e-9), 1)
    slot = np.minimum((trace.t // shape_s).astype(np.intp), stretches - 1)
    n = np.bincount(slot, minlength=stretches).astype(np.float64)
    out_sum = np.bincount(slot, weights=trace.outputs, minlength=stretches)
    edges = np.concatenate([[0], np.cumsum(n).astype(np.intp)])
    mixes: list[TokenMix] = []
    index = np.full(stretches, -1, dtype=np.intp)
    for w in range(stretches):
        lo, hi = edges[w], edges[w + 1]
        if hi > lo:
            index[w] = len(mixes)
            mixes.append(TokenMix.from_samples(trace.prompts[lo:hi], trace.outputs[lo:hi]))
    mean_out = np.divide(out_sum, n, out=np.zeros(stretches), where=n > 0)
    stretch = np.arange(count) // per_shape
    phase = stretch % stretches
    keep = np.ones(count, dtype=bool) if loop else stretch < stretches
    return Windows(window_s, np.where(keep, n[phase] * rate_scale / per_shape, 0.0),
                   np.where(keep, index[phase], -1), tuple(mixes),
                   np.where(keep, mean_out[phase], 0.0))
