"""Click parameter types shared by every command line (`serve`, `simulate`, `place`, `operator`).

Why not `click.FloatRange`: Python's float() reads "nan", "inf" and "1e999", and NaN compares
false with every bound, so `FloatRange(0, 10)` lets NaN through (and infinity through any
range open at the top). A NaN time scale or failure rate then surfaces far away as a
traceback or a hang. `FiniteFloat` refuses both with one sentence naming the option (click's
usage error: exit 2).
"""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.FloatRange):
    """A float option that must be a finite number, optionally within a range."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


FINITE_FLOAT = FiniteFloat()
