"""Write budgets: how many informative writes (Events) the operator may spend per second.

Why a budget: every admission already costs the API server two writes (the user's create and
our status write). An Event per admission would add a third, and on a small control plane the
API server's intake, not the scheduler, bounds admissions per second. Kubernetes treats Events
as best effort for the same reason (the kubelet's `--event-qps`/`--event-burst`): status is the
record, an Event is a notice. So Events are posted from a token bucket: a burst goes out at
once, a flood is thinned to `qps`, and what was dropped is counted and logged once a minute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("ultraplane.operator")


@dataclass
class TokenBucket:
    """`burst` tokens, refilled at `qps` per second of `clock` (monotonic seconds).

    `qps <= 0` means no limit.
    """

    qps: float
    burst: int
    clock: Callable[[], float]
    dropped: int = 0
    _tokens: float = field(init=False)
    _last: float = field(init=False)
    _reported: float = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = float(max(self.burst, 1))
        self._last = self._reported = self.clock()

    def take(self) -> bool:
        """Spend one token if there is one; count a drop otherwise."""
        if self.qps <= 0:
            return True
        now = self.clock()
        self._tokens = min(float(max(self.burst, 1)), self._tokens + (now - self._last) * self.qps)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.dropped += 1
        if now - self._reported >= 60.0:
            log.info("%d Events dropped by the Event budget (%.1f/s, burst %d) in the last "
                     "minute; job status holds every transition", self.dropped, self.qps,
                     self.burst)
            self.dropped, self._reported = 0, now
        return False
