"""The core never depends on its adapters.

import-linter checks the third-party side (kopf, kubernetes, FastAPI, SQL); it cannot see the
adapter packages, which live in sibling folders mapped into the `ultraplane` namespace, so this
test reads the core's imports directly.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "ultraplane"
FORBIDDEN = (
    "ultraplane.operator",
    "ultraplane.api",
    "ultraplane.simulator",
    "kopf",
    "kubernetes",
    "fastapi",
    "sqlmodel",
    "sqlalchemy",
)
# The CLI loads adapter commands by import path at run time; it imports none of them statically.
EXEMPT = {CORE / "cli.py"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


CORE_FILES = sorted(p for p in CORE.rglob("*.py") if p not in EXEMPT)


def test_core_files_are_found() -> None:
    assert len(CORE_FILES) >= 5


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_no_adapter(path: Path) -> None:
    bad = sorted(
        name
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )
    assert not bad, f"{path.name} imports {bad}"
