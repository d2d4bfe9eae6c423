"""Every module of the core is covered by the import contracts, by package, not by hand.

The contracts in pyproject.toml name the core's rooms (packages). A module added to a room is
covered the day it is written; a module added beside the rooms, or a new room, is covered by
none until a contract names it, and this test says so.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Modules that sit above the core's contracts on purpose: the package itself, the top-level
# command (it imports the adapters) and the Kubernetes client set-up the adapters share.
ABOVE_THE_CORE = {"ultraplane", "ultraplane.cli", "ultraplane.kubeclients"}


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _core_modules() -> list[str]:
    """Dotted names of every module under ultraplane/ (the core; adapters live elsewhere)."""
    names = []
    for path in sorted((ROOT / "ultraplane").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _covers(prefixes: list[str], module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _forbidden_sources(forbidding: str) -> list[str]:
    for contract in _contracts():
        if contract["type"] == "forbidden" and forbidding in contract["forbidden_modules"]:
            return list(contract["source_modules"])  # type: ignore[call-overload]
    raise AssertionError(f"no contract forbids {forbidding}")


def test_every_core_module_is_in_a_layer() -> None:
    layers = next(c for c in _contracts() if c["type"] == "layers")
    named = [name.strip() for layer in layers["layers"]  # type: ignore[attr-defined]
             for name in layer.split("|")]
    missing = [m for m in _core_modules() if m != "ultraplane" and not _covers(named, m)]
    assert not missing, f"core modules in no layer of the layers contract: {missing}"


def test_every_core_module_is_forbidden_the_adapters_and_their_libraries() -> None:
    for forbidding in ("kubernetes", "ultraplane.operator"):
        sources = _forbidden_sources(forbidding)
        missing = [m for m in _core_modules()
                   if m not in ABOVE_THE_CORE and not _covers(sources, m)]
        assert not missing, f"core modules that may import {forbidding}: {missing}"


def test_the_contracts_name_packages_and_top_level_modules_only() -> None:
    """A contract that lists a room's modules one by one would miss the next one written."""
    for forbidding in ("kubernetes", "ultraplane.operator"):
        for source in _forbidden_sources(forbidding):
            assert source.count(".") == 1, f"{source}: name its room, not the module"


def test_at_most_twelve_modules_sit_directly_in_the_core() -> None:
    loose = [p.name for p in (ROOT / "ultraplane").glob("*.py")]
    assert len(loose) <= 12, f"{len(loose)} modules directly in ultraplane/: {sorted(loose)}"
