"""Lay out the installed package tree as links, for the tools that cannot read `package-dir`.

Why: the adapters live in the top-level folders `operator/`, `api/` and `simulator/` (the
project's published layout) and are installed as `ultraplane.operator`, `ultraplane.api` and
`ultraplane.simulator` through setuptools' `package-dir`. mypy and import-linter find modules on
disk by their dotted path, so they saw `ultraplane/` alone: the adapters were never
type-checked and no layers contract could see them. This script builds
`build/package-tree/ultraplane/...` exactly as a wheel would hold it, with each source file a
symbolic link to the real one (edits need no rerun; new or removed files do), and both tools
read that tree (`mypy_path` and `lint-imports` in `.ci/run`). Errors name the linked path; the
part after `build/package-tree/` is the module's installed path.

Usage: python hack/package_tree.py   (prints the tree's root), then
    mypy                                                   (reads mypy_path)
    cd build/package-tree && lint-imports ../../pyproject.toml
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "package-tree"
SUFFIXES = {".py", ".pyi", ".typed"}


def package_dirs() -> dict[str, Path]:
    """Installed package name -> source folder, from pyproject's [tool.setuptools]."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config.get("package-dir", {})
    return {name: ROOT / folder for name, folder in mapping.items()}


def build(tree: Path = TREE) -> Path:
    """(Re)build the link tree under `tree`; returns it."""
    if tree.exists():
        shutil.rmtree(tree)
    for package, folder in sorted(package_dirs().items()):
        target = tree.joinpath(*package.split("."))
        for source in folder.rglob("*"):
            if source.suffix not in SUFFIXES or "__pycache__" in source.parts:
                continue
            link = target / source.relative_to(folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source.resolve())
    return tree


if __name__ == "__main__":
    sys.stdout.write(f"{build()}\n")
