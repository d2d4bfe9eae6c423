"""One logging flag on every command: `--log-level debug|info|warning|error`, `-v`, and
ULTRAPLANE_LOG_LEVEL, each setting the root logger before the command runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ultraplane.cli import main
from ultraplane.commands.logs import CHATTY, LEVELS, configure, log_level_option

COMMANDS = (["serve"], ["operator"], ["simulator"], ["simulator", "device-plugin"],
            ["simulate"], ["place"], ["profiles"], ["get"], ["why"], ["accounting"])


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    chatty = {n: logging.getLogger(n).level for n in CHATTY}
    yield
    root.setLevel(level)
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for name, lvl in chatty.items():
        logging.getLogger(name).setLevel(lvl)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_offers_the_same_log_level_choices(command: list[str]) -> None:
    res = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"--log-level [{'|'.join(LEVELS)}]" in res.output
    assert "-v, --verbose" in res.output and "ULTRAPLANE_LOG_LEVEL" in res.output


def _runs(tmp_path: Path) -> dict[str, list[str]]:
    """A quick invocation of each command; the cluster ones exit 2 for want of a cluster,
    after the logging set-up, which runs before any command body."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,0,100,4\n")
    missing = str(tmp_path / "no-kubeconfig")
    return {
        "profiles": ["profiles"],
        "place": ["place", "--fleet", "trn3-gen2:1", "--chips", "4"],
        "simulate": ["simulate", "--fleet", "trn3-gen2:1", "--trace", str(trace), "--out",
                     str(tmp_path / "o"), "--no-progress", "--policy", "ultraplane"],
        "serve": ["serve", "--backend", "kubernetes", "--kubeconfig", missing],
        "operator": ["operator", "--kubeconfig", missing],
        "simulator": ["simulator", "--kubeconfig", missing],
        "device-plugin": ["simulator", "device-plugin", "--chips", "4", "--plugin-dir",
                          str(tmp_path / "no-plugin-dir")],
        "get": ["get", "--server", "http://127.0.0.1:1"],  # the client: nothing listens there
    }


@pytest.mark.parametrize("name", ["profiles", "place", "simulate", "serve", "operator",
                                  "simulator", "device-plugin", "get"])
@pytest.mark.parametrize(("flags", "env", "expected"), [
    (["--log-level", "debug"], None, logging.DEBUG),
    (["--log-level", "ERROR"], None, logging.ERROR),
    (["-v"], None, logging.DEBUG),
    ([], "info", logging.INFO),
])
def test_the_flag_sets_the_level_before_the_command_runs(
        tmp_path: Path, name: str, flags: list[str], env: str | None, expected: int) -> None:
    args = _runs(tmp_path)[name]
    where = 2 if name == "device-plugin" else 1
    logging.getLogger().setLevel(logging.CRITICAL)
    res = CliRunner().invoke(main, [*args[:where], *flags, *args[where:]],
                             env={"ULTRAPLANE_LOG_LEVEL": env} if env else {})
    assert res.exit_code in (0, 2), res.output
    assert "Traceback" not in res.output
    assert logging.getLogger().level == expected


def test_a_group_level_holds_for_its_subcommand_unless_it_has_its_own(tmp_path: Path) -> None:
    plugin = ["--chips", "4", "--plugin-dir", str(tmp_path / "none")]
    for before, after, expected in ((["--log-level", "debug"], [], logging.DEBUG),
                                    (["-v"], [], logging.DEBUG),
                                    (["--log-level", "debug"], ["--log-level", "error"],
                                     logging.ERROR),
                                    ([], [], logging.INFO)):
        logging.getLogger().setLevel(logging.CRITICAL)
        res = CliRunner().invoke(main, ["simulator", *before, "device-plugin", *after, *plugin])
        assert res.exit_code == 2, res.output  # no plugin directory: after the set-up
        assert logging.getLogger().level == expected, (before, after)


def test_a_bad_level_is_exit_2_naming_the_flag() -> None:
    res = CliRunner().invoke(main, ["profiles", "--log-level", "loud"])
    assert res.exit_code == 2
    assert "--log-level" in res.output and "'loud' is not one of" in res.output


def test_configure_keeps_existing_handlers_and_quiets_chatty_libraries() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    configure("info")
    assert root.level == logging.INFO
    if before:
        assert root.handlers == before  # a test's capture or an embedder's handler stays alone
    assert logging.getLogger("kopf").level == logging.WARNING
    configure("error")
    assert logging.getLogger("kopf").level == logging.ERROR
    configure("debug")
    assert logging.getLogger("kopf").level == logging.DEBUG


def test_the_decorator_refuses_an_unknown_default() -> None:
    with pytest.raises(ValueError, match="default must be one of"):
        log_level_option(default="chatty")
