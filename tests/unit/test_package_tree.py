"""The link tree mypy and import-linter read (hack/package_tree.py) is the installed layout.

The layers contract in pyproject.toml is only worth having if the tools see every adapter
module under its installed name; this checks the tree holds each source file exactly once,
where `package-dir` installs it.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> object:
    spec = importlib.util.spec_from_file_location("package_tree", ROOT / "hack" / "package_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("package_tree", module)
    spec.loader.exec_module(module)
    return module


def test_every_source_file_is_linked_under_its_installed_name(tmp_path: Path) -> None:
    tool = _tool()
    tree = tool.build(tmp_path / "tree")  # type: ignore[attr-defined]
    expected = {}
    for package, folder in tool.package_dirs().items():  # type: ignore[attr-defined]
        for source in folder.rglob("*.py"):
            if "__pycache__" not in source.parts:
                installed = Path(*package.split(".")) / source.relative_to(folder)
                expected[installed] = source.resolve()
    linked = {p.relative_to(tree): p.resolve() for p in tree.rglob("*.py")}
    assert linked == expected
    for name in ("operator/loops.py", "api/backends/executors.py", "simulator/replay.py"):
        assert Path("ultraplane", name) in linked
    assert (tree / "ultraplane" / "py.typed").exists()


def test_every_package_folder_is_listed_for_the_non_editable_install() -> None:
    """The image installs with a plain `pip install .`: a package folder setuptools is not
    told of ships without its modules (an editable install would hide that)."""
    tool = _tool()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for package, folder in tool.package_dirs().items():  # type: ignore[attr-defined]
        for init in folder.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                parts = init.parent.relative_to(folder).parts
                found.add(".".join((package, *parts)))
    assert found == listed
