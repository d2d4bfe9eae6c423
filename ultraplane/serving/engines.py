"""The request-level reference: one replica's engine, request by request, step by step.

Why it exists: the closed-form model (`estimates`) is what the planner and the replay use,
because it costs microseconds. This engine costs a Python loop per step, so it serves only to
check the closed form (tests/unit/test_serving_fidelity.py, issue #35 item 6). It follows the
scheduling policy of vLLM V1 ("Optimization and Tuning", chunked prefill): every step runs all
decoding sequences one token first, then prefill chunks first come first served in what is
left of `chunk_tokens`; a request is admitted when its KV cache (prompt and output) fits and
fewer than `max_sequences` run; its first token comes out of the step that ends its prompt.
Step costs are `Replica.step`, the same the closed form prices.

Simplifications, stated: the whole KV cache of a request is reserved on admission (no
preemption), and the context a prefill chunk reads is not streamed from HBM (compute binds).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ultraplane.serving.replicas import Replica

__all__ = ["EngineRun", "run_engine"]


@dataclass(frozen=True)
class EngineRun:
    """Per-request latencies (seconds) and the replica's energy."""

    queueing_s: list[float]  # arrival -> its first prefill chunk's step starts (arrival order)
    ttft_s: list[float]  # arrival -> the step that produces its first token ends (arrival order)
    tpot_s: list[float]  # (last token - first token) / (output - 1): outputs of 2+, as they end
    energy_j: float
    seconds: float  # first arrival to the last step's end
    steps: int

    @property
    def watts(self) -> float:
        return self.energy_j / self.seconds if self.seconds > 0 else 0.0


def run_engine(replica: Replica, requests: Sequence[tuple[float, int, int]],
               cap: float | None = None) -> EngineRun:
    """Serve `requests` = (arrival seconds, prompt tokens, output tokens), sorted by arrival."""
    f = replica.figures
    kv_room, chunk = replica.kv_capacity_tokens, f.chunk_tokens
    n = len(requests)
    queueing = [0.0] * n
    first = [0.0] * n
    ttft = [0.0] * n
    tpot: list[float] = []
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()  # [request, prompt tokens done]
    decoding: list[tuple[int, int]] = []  # heap of (step it ends on, request)
    decode_context = 0
    kv_used = 0
    nxt = 0
    steps = 0
    t = requests[0][0] if n else 0.0
    start = t
    energy = 0.0
    idle_w = replica.idle_watts
    while nxt < n or waiting or prefilling or decoding:
        if not (waiting or prefilling or decoding) and requests[nxt][0] > t:
            energy += idle_w * (requests[nxt][0] - t)
            t = requests[nxt][0]
        while nxt < n and requests[nxt][0] <= t:
            waiting.append(nxt)
            nxt += 1
        budget = chunk - len(decoding)
        tokens = attended = 0
        chunks: list[list[int]] = []
        for entry in prefilling:
            if budget <= 0:
                break
            take = min(requests[entry[0]][1] - entry[1], budget)
            tokens += take
            attended += take * entry[1] + take * (take + 1) // 2
            chunks.append([entry[0], take])
            budget -= take
        while budget > 0 and waiting and len(prefilling) + len(decoding) < f.max_sequences:
            r = waiting[0]
            need = requests[r][1] + requests[r][2]
            if kv_used + need > kv_room:
                break
            waiting.popleft()
            kv_used += need
            queueing[r] = t - requests[r][0]
            prefilling.append([r, 0])
            take = min(requests[r][1], budget)
            tokens += take
            attended += take * (take + 1) // 2
            chunks.append([r, take])
            budget -= take
        if not chunks and not decoding:  # nothing fits: a request larger than the cache
            raise ValueError(f"request {waiting[0]} needs more KV cache than the replica has")
        seconds, chip_w = replica.step(tokens, attended, len(decoding), decode_context, cap)
        t += seconds
        energy += chip_w * replica.chips * seconds
        steps += 1
        decode_context += len(decoding)
        while decoding and decoding[0][0] == steps:
            _, r = heapq.heappop(decoding)
            prompt, output = requests[r][1], requests[r][2]
            decode_context -= prompt + output
            kv_used -= prompt + output
            tpot.append((t - first[r]) / (output - 1))
        for r, take in chunks:
            entry = next(e for e in prefilling if e[0] == r)  # near the front: FCFS
            entry[1] += take
            if entry[1] < requests[r][1]:
                continue
            prefilling.remove(entry)
            first[r] = t
            ttft[r] = t - requests[r][0]
            prompt, output = requests[r][1], requests[r][2]
            if output <= 1:
                kv_used -= prompt + output
                continue
            heapq.heappush(decoding, (steps + output - 1, r))
            decode_context += prompt + 1
    return EngineRun(queueing, ttft, tpot, energy, t - start, steps)
