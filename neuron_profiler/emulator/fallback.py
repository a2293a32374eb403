"""Which ops the emulated device runs on the host (CPU fallback), and why.

    from neuron_profiler.emulator import add_fallback_ops, fallback_ops, get_fallback_ops
    add_fallback_ops("aten::cumsum")          # or NEURON_PROFILER_FALLBACK_OPS="aten::cumsum,..."
    fallback_ops()                            # the configured set
    get_fallback_ops()                        # ops that really fell back so far (TorchNeuron's API)

TorchNeuron runs ops it has no device kernel for through ``at::native::cpu_fallback``. The default
set is the cost model's table (``costmodel.fallbacks``, which the projection reads too): ops
whose output shape depends on the data and dense linear-algebra factorisations. float64 inputs
fall back whatever the op (NeuronCores have no FP64 datapath).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from neuron_profiler.costmodel.fallbacks import DEFAULT_FALLBACK_OPS, normalise_op, out_of_place

__all__ = ["DEFAULT_FALLBACK_OPS", "add_fallback_ops", "fallback_ops", "is_fallback_op"]

ENV_VAR = "NEURON_PROFILER_FALLBACK_OPS"

REASON_UNSUPPORTED = "op not supported on NeuronCore"
REASON_FLOAT64 = "float64 not supported on NeuronCore"

_lock = threading.Lock()
_configured: set[str] = set()
_seen: set[str] = set()


def _from_env() -> set[str]:
    raw = os.environ.get(ENV_VAR, "")
    return {normalise_op(n) for n in raw.split(",") if n.strip()}


def reset_fallback_ops() -> None:
    """Back to the default set plus ``NEURON_PROFILER_FALLBACK_OPS`` (read now)."""
    with _lock:
        _configured.clear()
        _configured.update(DEFAULT_FALLBACK_OPS, _from_env())


def add_fallback_ops(*names: str) -> None:
    """Run these ops (``"aten::name"`` or ``"name"``: every overload and the in-place variant)
    on the host from now on."""
    with _lock:
        _configured.update(normalise_op(n) for n in names)
    _invalidate()


def remove_fallback_ops(*names: str) -> None:
    with _lock:
        _configured.difference_update(normalise_op(n) for n in names)
    _invalidate()


def fallback_ops() -> frozenset[str]:
    """The configured set: op names (overload packets) that run on the host."""
    return frozenset(_configured)


def get_fallback_ops() -> frozenset[str]:
    """Ops that have fallen back at least once (like ``torch_neuronx.get_fallback_ops()``)."""
    return frozenset(_seen)


def note_fallback(name: str) -> None:
    _seen.add(name)


def is_fallback_op(packet_name: str) -> bool:
    """``aten::add`` in the set covers add, add.out and the in-place add_."""
    return packet_name in _configured or out_of_place(packet_name) in _configured


_listeners: list[Callable[[], None]] = []


def on_change(fn: Callable[[], None]) -> None:
    """The dispatcher caches per-op decisions; it registers here to drop them on a change."""
    _listeners.append(fn)


def _invalidate() -> None:
    for fn in _listeners:
        fn()


reset_fallback_ops()
