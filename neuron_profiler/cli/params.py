"""Click parameter types shared by the subcommands."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """A ``FloatRange`` that refuses ``nan`` and ``inf``: click's own lets them through (``nan``
    compares false with every bound), and a gap or timeout of ``nan`` has no meaning."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
