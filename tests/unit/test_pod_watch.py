"""The pod data plane's own pod watch (operator/podwatch.py): list, watch, resume, relist."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

from ultraplane.operator.podwatch import Expired, PodWatch

LABEL = "ultraplane.dev/job-uid"


def pod(name: str, rv: str, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "status": {"phase": phase}}


def line(kind: str, body: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": body}).encode()


class ScriptedKube:
    """Lists and watch streams played from a script; records what each call asked for."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.asked: list[tuple[str, str]] = []
        self.idle = threading.Event()  # the script ran out: the watch blocks here

    def list_pods(self, namespace: str | None, label: str) -> tuple[list[dict[str, Any]], str]:
        assert (namespace, label) == ("ns", LABEL)
        items = self.lists.pop(0)
        self.asked.append(("list", ""))
        return items, max((p["metadata"]["resourceVersion"] for p in items), default="1")

    def watch_pods(self, namespace: str | None, label: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[list[bytes]]:
        self.asked.append(("watch", resource_version))
        if not self.watches:
            self.idle.set()
            threading.Event().wait(3600)  # the daemon thread parks here
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


def test_it_lists_watches_resumes_from_the_last_version_and_relists_when_expired() -> None:
    kube = ScriptedKube(
        lists=[[pod("a", "10"), pod("b", "11")], [pod("a", "30", "Running")]],
        watches=[
            [[line("MODIFIED", pod("a", "12", "Running"))],
             [line("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]],
            [[line("ERROR", {"code": 410, "message": "too old"})]],
        ])
    lists: list[tuple[str | None, list[str]]] = []
    events: list[tuple[str, str]] = []

    async def run() -> None:
        watch = PodWatch(kube, LABEL, ["ns"],
                         on_list=lambda ns, items: lists.append(
                             (ns, [p["metadata"]["name"] for p in items])),
                         on_events=lambda batch: events.extend(
                             (k, b["metadata"]["name"]) for k, b in batch),
                         pause=0.01)
        await watch.sync()
        assert lists == [("ns", ["a", "b"])]  # delivered before sync returns
        watch.start()
        while not kube.idle.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # let the last call_soon_threadsafe callbacks run
        watch.close()

    asyncio.run(run())
    assert events == [("MODIFIED", "a")]  # a bookmark is no event
    assert lists == [("ns", ["a", "b"]), ("ns", ["a"])]
    # resumed from the bookmark's version; listed again after the 410; watched from that list
    assert kube.asked == [("list", ""), ("watch", "11"), ("watch", "20"), ("list", ""),
                          ("watch", "30")]


def test_a_watch_refused_as_too_old_lists_again() -> None:
    kube = ScriptedKube(lists=[[pod("a", "10")], [pod("a", "40")]], watches=[Expired("410")])
    lists: list[str | None] = []

    async def run() -> None:
        watch = PodWatch(kube, LABEL, ["ns"], on_list=lambda ns, items: lists.append(ns),
                         on_events=lambda batch: None, pause=0.01)
        await watch.sync()
        watch.start()
        while not kube.idle.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        watch.close()

    asyncio.run(run())
    assert lists == ["ns", "ns"]
    assert kube.asked == [("list", ""), ("watch", "10"), ("list", ""), ("watch", "40")]


def job_pod(name: str, rank: int) -> dict[str, Any]:
    return {"metadata": {
        "name": name, "namespace": "ns", "resourceVersion": "5",
        "labels": {"ultraplane.dev/job-uid": "u1", "ultraplane.dev/attempt": "1",
                   "ultraplane.dev/group": "0", "ultraplane.dev/rank": str(rank)},
        "annotations": {"ultraplane.dev/job-key": "tj/ns/llama",
                        "ultraplane.dev/server": f"us-a/s{rank:02d}",
                        "ultraplane.dev/chips": f"us-a/s{rank:02d}/c00-c03"}},
        "status": {"phase": "Running"}}


def test_a_listing_without_a_known_pod_counts_it_deleted_but_not_one_just_created() -> None:
    from ultraplane.operator.pods import PodPlane, pod_info

    from tests.unit.operator_fakes import FakeKube, controller

    async def run() -> PodPlane:
        plane = PodPlane(FakeKube(), controller(FakeKube()))  # type: ignore[arg-type]
        plane.observe_pods([("ADDED", job_pod("llama-0-a1", 0)),
                            ("ADDED", job_pod("llama-1-a1", 1))])
        found = pod_info(job_pod("llama-2-a1", 2))
        assert found is not None
        found[1].seen = False  # as `_create` records its own pods before any event
        plane.jobs[found[0]].pods["llama-2-a1"] = found[1]
        plane.relisted("ns", [job_pod("llama-0-a1", 0)])
        return plane

    plane = asyncio.run(run())
    pods = plane.jobs["tj/ns/llama"].pods  # type: ignore[index]
    assert [n for n, p in sorted(pods.items()) if p.vanished] == ["llama-1-a1"]
    assert pods["llama-1-a1"].chips == tuple(f"us-a/s01/c{c:02d}" for c in range(4))
    assert not plane.holders.get("us-a/s01/c00")  # type: ignore[call-overload]
