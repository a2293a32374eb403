"""The emulated Neuron device: GPU-style PyTorch code runs unchanged on ``torch.device("neuron")``
and the emulated runtime emits Neuron system-trace events (docs/emulator.md,
docs/runtime-events.md).

    import neuron_profiler.emulator as emu
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)   # or NEURON_PROFILER_EMULATE=1

Importing this package is torch-free unless ``NEURON_PROFILER_EMULATE=1`` is set (then it
enables the device at once; ``NEURON_PROFILER_EMULATE_CORES``, ``..._CHIP`` and
``..._SPEED_FACTOR`` override the defaults). ``runtime``, ``chips``, ``timing``, ``scheduler``,
``fallback`` and ``modelled`` never import torch.
"""

from __future__ import annotations

import os

from neuron_profiler.emulator.fallback import (
    add_fallback_ops,
    fallback_ops,
    get_fallback_ops,
    remove_fallback_ops,
    reset_fallback_ops,
)
from neuron_profiler.emulator.modelled import ModelledValueWarning

ENV_EMULATE = "NEURON_PROFILER_EMULATE"

__all__ = [
    "ENV_EMULATE",
    "ModelledValueWarning",
    "add_fallback_ops",
    "enable",
    "fallback_ops",
    "get_fallback_ops",
    "is_enabled",
    "remove_fallback_ops",
    "reset_fallback_ops",
]


def enable(
    cores: int = 2,
    chip: str = "trn2",
    speed_factor: float = 1.0,
    *,
    numerics: bool | None = None,
    queue_depth: int | None = None,
) -> None:
    """Register the emulated "neuron" device (see ``device.enable``).

    ``numerics=False``: timing mode (large ops' outputs of the right shape, not computed; small
    ops computed: docs/emulator.md);
    None: ``NEURON_PROFILER_EMULATE_NUMERICS`` (default on). ``queue_depth``: launch-queue bound
    per core (None: ``NEURON_PROFILER_EMULATE_QUEUE_DEPTH``, else the chip table's 63)."""
    from neuron_profiler.emulator.device import enable as _enable

    _enable(
        cores=cores,
        chip=chip,
        speed_factor=speed_factor,
        numerics=numerics,
        queue_depth=queue_depth,
    )


def is_enabled() -> bool:
    import sys

    device = sys.modules.get("neuron_profiler.emulator.device")
    return bool(device is not None and device.is_enabled())


def _enable_from_env() -> None:
    env = os.environ
    enable(
        cores=int(env.get(ENV_EMULATE + "_CORES", "2")),
        chip=env.get(ENV_EMULATE + "_CHIP", "trn2"),
        speed_factor=float(env.get(ENV_EMULATE + "_SPEED_FACTOR", "1.0")),
    )


if os.environ.get(ENV_EMULATE, "").strip().lower() in ("1", "true", "yes", "on"):
    _enable_from_env()
