"""No adapter changes the core's state except through the driver's triggers (issue 34).

The operator, the REST API and the simulator each hold an `Admissions` and hand it triggers (a
cycle, a job observed, a chip or pod failed, a job finished, deleted or drained); the
`Scheduler` it owns is the core's own. An adapter that reaches it (`admissions.scheduler`, a
`Scheduler` of its own, `scheduler.cancel(...)`) decides a consequence beside the core, which
is how the copies drifted before. This scans every module of the three adapters' source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ("operator", "api", "simulator")
SCHEDULER_MODULE = "ultraplane.scheduling.scheduler"
# What changes the Scheduler's state: an adapter hands the driver a trigger instead.
MUTATORS = frozenset({"submit", "cancel", "requeue", "restore", "restore_replicas",
                      "expect_end", "cycle"})


def _mentions_scheduler(node: ast.expr) -> bool:
    """Whether a call's receiver names a scheduler anywhere along its chain (`scheduler`,
    `self.sched`, `b.scheduler_of(x)`)."""
    for part in ast.walk(node):
        name = part.id if isinstance(part, ast.Name) else (
            part.attr if isinstance(part, ast.Attribute) else "")
        if "sched" in name.lower():
            return True
    return False


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an import statement may bind (`from a import b` may bind `a.b`)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    return {str(node.module), *(f"{node.module}.{a.name}" for a in node.names)}


def violations(source: str) -> list[str]:
    """Each place `source` reaches the Scheduler, as `line: what`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import | ast.ImportFrom) and SCHEDULER_MODULE in _imported(node):
            found.append(f"{line}: imports {SCHEDULER_MODULE}")
        elif isinstance(node, ast.alias) and node.name == "Scheduler":
            found.append(f"{line}: imports Scheduler")
        elif isinstance(node, ast.Name) and node.id == "Scheduler":
            found.append(f"{line}: uses Scheduler")
        elif isinstance(node, ast.Attribute) and node.attr in ("scheduler", "Scheduler"):
            found.append(f"{line}: reaches .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS and _mentions_scheduler(node.func.value)):
            found.append(f"{line}: calls {node.func.attr} on a scheduler")
    return found


def _adapter_modules() -> list[Path]:
    return sorted(p for folder in ADAPTERS for p in (ROOT / folder).rglob("*.py"))


def test_no_adapter_module_reaches_the_scheduler() -> None:
    modules = _adapter_modules()
    assert len(modules) > 80, "the scan found too few adapter modules to mean anything"
    found = {str(p.relative_to(ROOT)): v for p in modules
             if (v := violations(p.read_text(encoding="utf-8")))}
    assert found == {}, f"adapters reaching the Scheduler (use Admissions' triggers): {found}"


@pytest.mark.parametrize("source", [
    "from ultraplane.scheduling.scheduler import Scheduler",
    "import ultraplane.scheduling.scheduler",
    "from ultraplane.scheduling import scheduler",
    "self.controller.scheduler.cancel(key)",
    "running = self.admissions.scheduler.running()",
    "sched = make()\nsched.requeue(key)",
    "def f(scheduler):\n    scheduler.expect_end(key, 3.0)",
    "self.b.sched.restore(key, chips)",
])
def test_the_scan_catches_each_way_of_reaching_it(source: str) -> None:
    assert violations(source)


def test_the_scan_lets_the_drivers_triggers_through() -> None:
    source = ("self.admissions.submit(job)\nself.b.admissions.expect_end(key, 1.0)\n"
              "decisions = admissions.cycle(now)\nself.admissions.requeue(key)\n"
              "queue.submit(job)\n")
    assert violations(source) == []
