"""Timing mode: which device tensors hold modelled values; one warning when a program reads them.

A modelled op (outputs.py: too large to compute) leaves zeros where its results would be. Each
device tensor's ``_modelled`` names the op whose zeros it holds or was computed from (None: its
values are real). dispatch.py sets it: a modelled op's outputs and the inputs it writes get the
op's name; an op computed for real passes its inputs' name on (views too); a device -> device
copy passes the source's on, and a copy from the host clears it.

When the program reads such values on the host (``.item()``, ``bool()``, ``.cpu()``,
``.tolist()``), or an op reads them to decide a shape or a host value (``nonzero``, ``unique``,
``torch.equal``: CPU-fallback and data-dependent ops), it gets a ``ModelledValueWarning`` naming
the op, once per op: control flow that depends on these values sees zeros (a loop waiting on them
may never end). Reads are counted, every one: past ``read_limit()`` (100,000, or
``NEURON_PROFILER_EMULATE_MODELLED_READS``; 0 turns the guard off) the read raises
``ModelledValueError`` naming the first op read and where, instead of letting such a loop run
on for ever. A program that reads a modelled value once per step (a logged loss) reaches the
limit only after 100,000 steps. Torch-free, like the rest of the runtime side.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from neuron_profiler.errors import EmulatorError


class ModelledValueWarning(UserWarning):
    """A program read values that timing mode did not compute (they are zeros)."""


class ModelledValueError(EmulatorError):
    """A program kept reading values timing mode did not compute, past the guard's limit: its
    control flow almost certainly waits on them (they stay zeros)."""


ENV_READ_LIMIT = "NEURON_PROFILER_EMULATE_MODELLED_READS"
DEFAULT_READ_LIMIT = 100_000  # far past one read per step of any timing run, a few s of a loop

_warned: set[str] = set()
_reads = [0]  # reads of modelled values since enable()
_first: list[str] = []  # the first read: "<op> read by <reader> at <file>:<line>"
# frames of the emulator and of torch are skipped: the warning points at the program's own line
_INTERNAL = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def origin(tensors: Iterable[Any]) -> str | None:
    """The op whose modelled values any of these device tensors holds (the first found)."""
    for t in tensors:
        name = t._modelled
        if name is not None:
            return name
    return None


def mark(out: Any, name: str | None) -> None:
    """Record on every device tensor in ``out`` (a tensor, or lists/tuples of them) that it holds
    ``name``'s modelled values; None marks nothing."""
    if name is None:
        return
    if type(out) is list or type(out) is tuple:
        for o in out:
            mark(o, name)
    elif hasattr(out, "_modelled"):
        out._modelled = name


def read_limit() -> int:
    """Reads of modelled values allowed before ``ModelledValueError`` (0: no limit)."""
    raw = os.environ.get(ENV_READ_LIMIT, "").strip()
    try:
        return max(0, int(raw)) if raw else DEFAULT_READ_LIMIT
    except ValueError:
        raise ValueError(f"{ENV_READ_LIMIT}={raw!r}: expected a whole number of reads") from None


def warn_read(name: str, reader: str) -> None:
    """Count a read of ``name``'s modelled values by ``reader``; warn once per modelled op, and
    raise ``ModelledValueError`` once the reads pass ``read_limit()``."""
    _reads[0] += 1
    if not _first:
        _first.append(f"{name} read by {reader}{_where(_caller_level() - 1)}")
    limit = read_limit()
    if limit and _reads[0] > limit:
        raise ModelledValueError(
            f"timing mode: the program read values that were not computed {_reads[0]:,} times "
            f"(first: {_first[0]}); they are zeros, so control flow waiting on them never ends. "
            "Run with enable(numerics=True), or raise "
            f"{ENV_READ_LIMIT} (now {limit:,}; 0: no limit) if the reads are meant."
        )
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(
        f"value of {name} was not computed in timing mode (modelled: it holds zeros); "
        f"{reader} reads it, so values and control flow that depend on it see zeros (a loop "
        "that waits on them may never end). Small ops are computed for real in timing mode, "
        f"large ones are not (docs/emulator.md); enable(numerics=True) computes every op.",
        ModelledValueWarning,
        stacklevel=_caller_level(),
    )


def _where(depth: int) -> str:
    """ "" at file:line" of the frame ``depth`` above ``warn_read`` ("" past the stack)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return ""
    return f" at {frame.f_code.co_filename}:{frame.f_lineno}"


def _caller_level() -> int:
    """``stacklevel`` of the first frame outside the emulator and torch (who reads the values)."""
    internal = _INTERNAL + _torch_dir()
    frame, level = sys._getframe(2), 2  # 1: warn_read, 2: its caller (warnings counts from 1)
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    return level


def _torch_dir() -> tuple[str, ...]:
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    return (os.path.dirname(file) + os.sep,) if file else ()


def reset() -> None:
    """Warn again for every op and count reads from zero (``enable`` calls it)."""
    _warned.clear()
    _reads[0] = 0
    _first.clear()
