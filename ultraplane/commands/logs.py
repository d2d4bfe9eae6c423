"""The one logging flag every `ultraplane` command takes, and the one logging set-up behind it.

Why one helper: the commands grew their own flags (`serve --log-level` for
uvicorn only, `operator -v`, `simulator device-plugin -v`, nothing on
`simulate` or `place`), so a user had to learn each. Every command now takes
`--log-level debug|info|warning|error` (also from ULTRAPLANE_LOG_LEVEL, so a
chart or a shell sets it once), and `-v`/`--verbose`, the same as `--log-level
debug`, kept for the scripts that pass it. Only the default differs, by what
the command is: daemons (operator, simulator) log at info, one-shot commands
at warning.

Chatty libraries (kopf's per-object lines, the Kubernetes client's HTTP,
matplotlib's font search) stay at warning unless the level is debug, as the
operator did before. Logging is configured with the standard library only;
handlers already on the root logger (a test's capture, an embedding program's)
are kept, never replaced.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

LEVELS = ("debug", "info", "warning", "error")
ENV = "ULTRAPLANE_LOG_LEVEL"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# at warning (or the chosen level, if higher) unless the level is debug
_CHOSEN = "ultraplane.commands.logs.chosen"  # click context meta key: the level a user asked for
CHATTY = ("kopf", "asyncio", "kubernetes", "urllib3", "matplotlib", "PIL", "httpx", "httpcore")


def configure(level: str) -> int:
    """Set the root logger to `level` (one of LEVELS), with a stderr handler if it has none."""
    number = logging.getLevelNamesMapping()[level.upper()]
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(number)
    for name in CHATTY:
        logging.getLogger(name).setLevel(number if number == logging.DEBUG
                                         else max(number, logging.WARNING))
    return number


def level_name() -> str:
    """The root logger's level as one of LEVELS (what `configure` set), for uvicorn and kin."""
    name = logging.getLevelName(logging.getLogger().level).lower()
    return name if name in LEVELS else "warning"


def log_level_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a click command's function (below `@click.command`): adds `--log-level` and
    `-v/--verbose`, configures logging before the command runs, and keeps both out of its
    arguments."""
    if default not in LEVELS:
        raise ValueError(f"default must be one of {', '.join(LEVELS)}")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def run(*args: Any, log_level: str, verbose: bool, **kwargs: Any) -> Any:
            # a group's explicit level (`simulator --log-level debug device-plugin`) holds for
            # its subcommand unless the subcommand is given its own
            ctx = click.get_current_context()
            source = ctx.get_parameter_source("log_level")
            if verbose or source not in (None, ParameterSource.DEFAULT):
                ctx.meta[_CHOSEN] = "debug" if verbose else log_level
            configure(ctx.meta.get(_CHOSEN, log_level))
            return f(*args, **kwargs)

        verbose = click.option("--verbose", "-v", is_flag=True,
                               help="Debug logging: the same as --log-level debug.")(run)
        return click.option("--log-level", type=click.Choice(LEVELS, case_sensitive=False),
                            default=default, show_default=True, envvar=ENV, show_envvar=True,
                            callback=lambda _c, _p, v: v.lower(),
                            help="How much to log (to stderr).")(verbose)

    return decorate
