"""A lease gain (`Controller.take_over`): the loop gets freshly built parts, rebuilt from the
API server, while the wake event, the API pool and the pod data plane's hooks stay."""

from __future__ import annotations

import asyncio

from ultraplane.operator.loops import LaunchGate

from tests.unit.operator_fakes import FakeKube, controller, settle
from ultraplane.ids import JobKey


class NoHold:
    def held(self) -> str | None:
        return None

    def budget(self) -> int | None:
        return None

    def owe(self, key: JobKey, pods: int) -> None:
        pass


def test_a_lease_gain_rebuilds_from_the_api_server_and_keeps_the_hooks() -> None:
    # gen2-0000 [a 72 | .. 72]: a was admitted by this replica; while it did not lead, a was
    # deleted and another replica admitted b on its chips. After the gain only the API server
    # counts: b holds those chips, and d takes the other half.
    async def scenario() -> None:
        kube = FakeKube()
        c = controller(kube)
        written: list[JobKey] = []
        c.on_written = written.append
        gate: LaunchGate = NoHold()
        c.launches = gate
        wake, api = c.wake, c.api
        kube.add_job("a", 72)
        await c.sync()
        await settle(c)
        assert kube.jobs["a"]["status"]["phase"] == "Admitted"
        old_cache = c.cache
        c.step_down()
        assert not c.leader and not c.ready
        chips = list(kube.jobs["a"]["status"]["allocation"]["chips"])
        del kube.jobs["a"]  # and b admitted on a's chips by the other replica
        kube.add_job("b", 72, phase="Admitted", attempt=0, allocation={"chips": chips})
        await c.take_over()
        assert c.leader and not c.ready and c.cache is not old_cache and not c.bodies
        await c.sync()
        assert c.ready and c.admissions.is_running("tj/ns/b")
        assert not c.admissions.is_running("tj/ns/a")  # gone while we did not lead
        assert c.wake is wake and c.api is api and c.launches is gate
        c.observe_job(kube.add_job("d", 72))
        await settle(c)
        assert kube.jobs["d"]["status"]["phase"] == "Admitted"
        assert JobKey("tj/ns/d") in written  # the pod plane still hears of every write
        assert set(kube.jobs["d"]["status"]["allocation"]["chips"]).isdisjoint(chips)

    asyncio.run(scenario())
