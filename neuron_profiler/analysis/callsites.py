"""The user's Python call site of host ops, when the trace recorded stacks::

    call_sites(trace, rows)        # ["train.py:42 step", "", ...], one per row ("" unknown)

Two sources, the first that has one:

- ``python_function`` rows (``with_stack=True`` in current torch): one row per Python call,
  nested by time on the op's thread. The innermost user frame around the op's start wins. The
  line is the one the profiler names the frame by: the function's first line for calls made
  while profiling.
- the ``Call stack`` arg (older traces, frames innermost first: ``file(line): function;...``) of
  the op or, for rows without it (runtime calls, fallback rows), of the innermost ``cpu_op``
  around it on its thread that has one. The line is the one being run.

User code is every frame but those of torch, of installed packages (``site-packages``,
``dist-packages``), of the Python standard library and of this project's emulated device (it
stands for the device runtime); entries that are not ``file(line): function`` (built-in
methods, ``nn.Module: ...``) are not frames. A call site is written ``file:line function``.
"""

from __future__ import annotations

import re

import numpy as np

from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis._intervals import distinct
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_NOT_USER = re.compile(
    r"(^|[/\\])(torch|site-packages|dist-packages)[/\\]"
    r"|(^|[/\\])lib[/\\]python\d[\d.]*[/\\]"
    r"|(^|[/\\])neuron_profiler[/\\]emulator[/\\]|^<"
)


def user_frame(text: str) -> str:
    """``"a/train.py(42): step"`` -> ``"a/train.py:42 step"``; "" for a frame that is not user
    code or not a frame."""
    m = _FRAME.match(text.strip())
    if m is None or _NOT_USER.search(m["file"]):
        return ""
    return f"{m['file']}:{m['line']} {m['func']}"


def call_sites(trace: Trace, rows: np.ndarray | list[int]) -> list[str]:
    rows = np.asarray(rows, dtype=np.int64)
    out = _from_python_rows(trace, rows)
    missing = [j for j, site in enumerate(out) if not site]
    if missing:
        for j, site in zip(missing, _from_call_stacks(trace, rows[missing]), strict=True):
            out[j] = site
    return out


def _enclosing(trace: Trace, candidates: np.ndarray, row: int) -> np.ndarray:
    """The candidate rows on ``row``'s thread around its start, innermost first."""
    c = trace.columns
    t = c[S.TS_NS][row]
    start = c[S.TS_NS][candidates]
    hit = candidates[
        (c[S.PID][candidates] == c[S.PID][row])
        & (c[S.TID][candidates] == c[S.TID][row])
        & (start <= t)
        & (start + c[S.DUR_NS][candidates] >= t)
    ]
    order = np.lexsort((c[S.DUR_NS][hit], -c[S.TS_NS][hit]))  # latest start, then shortest
    return hit[order]


def _from_python_rows(trace: Trace, rows: np.ndarray) -> list[str]:
    py = trace.select(kind=S.EventKind.PYTHON, ph=S.Phase.COMPLETE)
    if len(py) == 0 or len(rows) == 0:
        return [""] * len(rows)
    frames = {int(i): user_frame(trace.strings[i]) for i in distinct(trace.col(S.NAME_ID)[py])}
    user = py[np.fromiter((bool(frames[int(n)]) for n in trace.col(S.NAME_ID)[py]), bool, len(py))]
    out = []
    for row in rows.tolist():  # a few evidence rows per report
        around = _enclosing(trace, user, row)
        out.append(frames[int(trace.col(S.NAME_ID)[around[0]])] if len(around) else "")
    return out


def _from_call_stacks(trace: Trace, rows: np.ndarray) -> list[str]:
    ops = trace.select(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE)
    out = []
    for row in rows.tolist():
        around = _enclosing(trace, ops, row)
        chain = np.concatenate([[row], around[around != row]]).astype(np.int64)
        stacks = arg_values(trace, chain, (V.ARG_CALL_STACK,))[V.ARG_CALL_STACK]
        out.append(
            next(
                (
                    site
                    for stack in stacks
                    if isinstance(stack, str)
                    for site in map(user_frame, stack.split(";"))
                    if site
                ),
                "",
            )
        )
    return out
