"""The clients of simulated model servers: a request trace offered to an InferenceJob's replicas.

Why a client apart from the servers: on a cluster, load comes from outside the InferenceJob,
and a replica's share of it depends on how many replicas there are. So one process replays
the trace (`serving.requesttraces`: the Azure CSV format, at the rate multiples of
`--rate-steps`) and, once a tick, spreads the tick's requests round robin over the addresses
its target name resolves to. Pointed at the job's headless Service (`NAME.NAMESPACE.svc`,
which the operator creates with every pod of the job), that is every replica the job has
now: a scale-up gets its share as soon as its pod listens, a removed replica gets none once
its pod is gone, as with a client-side load balancer over DNS. A replica that does not answer
(a pod still starting) has its requests re-sent to those that did, as a client retries.
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ultraplane.serving.requesttraces import Ints, RateSteps, RequestTrace

__all__ = ["LoadGenerator", "Offer", "resolver"]

log = logging.getLogger("ultraplane.simulator")

Post = Callable[[str, list[int], list[int]], bool]


def resolver(name: str) -> Callable[[], list[str]]:
    """The IPv4 addresses `name` resolves to now, sorted; none while it does not resolve."""

    def resolve() -> list[str]:
        try:
            infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            return []
        return sorted({str(info[4][0]) for info in infos})

    return resolve


def http_post(port: int, timeout: float = 2.0) -> Post:
    """POST a batch to `http://ADDRESS:port/requests`; False when it is not taken."""

    def post(address: str, prompts: list[int], outputs: list[int]) -> bool:
        body = json.dumps({"promptTokens": prompts, "outputTokens": outputs}).encode()
        request = urllib.request.Request(f"http://{address}:{port}/requests", data=body,
                                         method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return 200 <= int(r.status) < 300
        except (OSError, ValueError):
            return False

    return post


@dataclass
class Offer:
    """One tick: how many requests went to each address, and how many found no replica."""

    sent: dict[str, int] = field(default_factory=dict)
    dropped: int = 0


class LoadGenerator:
    """Offers the trace's requests since the last tick to the addresses resolved now."""

    def __init__(self, trace: RequestTrace, steps: RateSteps, *,
                 resolve: Callable[[], Sequence[str]], post: Post,
                 clock: Callable[[], float]) -> None:
        self.trace, self.steps = trace, steps
        self.resolve, self.post, self.clock = resolve, post, clock
        self.start = self.last = clock()

    def tick(self) -> Offer:
        now = self.clock()
        t0, t1 = self.last - self.start, now - self.start
        self.last = now
        prompts, outputs = self.trace.between(t0, t1, self.steps.at(t0))
        offer = Offer()
        addresses = list(self.resolve())
        if not addresses:
            offer.dropped = int(prompts.size)
            return offer
        k = len(addresses)
        failed: list[int] = []  # the indexes of requests a replica did not take
        for i, address in enumerate(addresses):
            share = list(range(i, int(prompts.size), k))
            if self._send(address, share, prompts, outputs):
                offer.sent[address] = len(share)
            else:
                failed += share
        answered = list(offer.sent)
        if failed and not answered:
            offer.dropped = len(failed)
        for i, address in enumerate(answered if failed else ()):
            again = failed[i::len(answered)]
            if self._send(address, again, prompts, outputs):
                offer.sent[address] += len(again)
            else:
                offer.dropped += len(again)
        return offer

    def _send(self, address: str, share: list[int], prompts: Ints, outputs: Ints) -> bool:
        return self.post(address, [int(prompts[j]) for j in share],
                         [int(outputs[j]) for j in share])
