"""What the operator's statuses and Events say across a job's life (against FakeKube).

    gen2-0000 [144 chips]   (gen2-0001 [144 chips] where two are needed)
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.operator_fakes import FakeKube, controller, settle


def _recorder(c: Any) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    c.emit = lambda body, kind, reason, message: events.append(
        (body["metadata"]["name"], kind, reason))
    return events


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    for cond in obj["status"].get("conditions") or []:
        if cond["type"] == type_:
            return str(cond["status"])
    return None


def test_preempted_condition_clears_when_the_job_is_admitted_again() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        kube.add_job("low", 144)
        await c.sync()
        await settle(c)
        c.observe_job(kube.add_job("high", 144, 5))
        await settle(c)
        assert _condition(kube.jobs["low"], "Preempted") == "True"
        del kube.jobs["high"]
        c.observe_job(kube.get_job("trainingjobs", "ns", "low"))
        c.forget(next(k for k in c.bodies if k.endswith("/high")))
        await settle(c)
        assert kube.jobs["low"]["status"]["phase"] == "Admitted"
        assert _condition(kube.jobs["low"], "Preempted") == "False"

    asyncio.run(scenario())


def test_running_and_succeeded_post_events_and_a_finished_job_names_no_chips() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        events = _recorder(c)
        kube.add_job("a", 16)
        await c.sync()
        await settle(c)
        obj = kube.jobs["a"]
        for phase in ("Running", "Succeeded"):  # the simulator's writes
            obj["status"]["phase"] = phase
            c.observe_job(kube.bump(obj))
            await settle(c)
        assert [e for e in events if e[0] == "a"] == [
            ("a", "Normal", "Admitted"), ("a", "Normal", "Running"),
            ("a", "Normal", "Succeeded")]
        assert kube.jobs["a"]["status"]["phase"] == "Succeeded"
        assert "allocation" not in kube.jobs["a"]["status"]
        assert not c.allocator.allocations()

    asyncio.run(scenario())


def test_the_pending_message_names_the_ultraservers_the_reserved_column_shows() -> None:
    # gen2-0000 [a 100 | d 20 | 24 free]   gen2-0001 [b 90 | 54 free]
    # big (144) reserves gen2-0001 (more free chips). a ends: gen2-0000 has 124 free, and the
    # reservation moves there; big's Pending message must move with it.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube, servers=2)
        for name, chips in (("a", 100), ("b", 90), ("d", 20)):
            kube.add_job(name, chips)
        await c.sync()
        await settle(c)
        c.observe_job(kube.add_job("big", 144))
        c.observe_job(kube.add_job("small", 4))
        await settle(c)

        def reserved() -> list[str]:
            return sorted(n for n, st in kube.us_status.items() if st.get("reservedFor"))

        assert reserved() == ["gen2-0001"]
        assert "gen2-0001" in kube.jobs["big"]["status"]["message"]
        obj = kube.jobs["a"]
        obj["status"]["phase"] = "Succeeded"
        c.observe_job(kube.bump(obj))
        await settle(c)
        assert reserved() == ["gen2-0000"]
        message = kube.jobs["big"]["status"]["message"]
        assert "gen2-0000" in message and "gen2-0001" not in message

    asyncio.run(scenario())
