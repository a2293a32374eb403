"""Which communication backend the emulated device's process groups use: gloo.

The emulated device runs every collective on its tensors' host memory, as a CPU collective of
the same group (``collectives.py``), so a group serves "neuron" only through a host backend.

- ``dist.init_process_group()`` with no backend picks the accelerator's default backend from
  ``Backend.default_device_backend_map`` (torch's table for third-party devices): "neuron" is
  mapped to gloo there, as "cpu" and "mps" are.
- torch then registers gloo for the "neuron" device only (as it registers NCCL for "cuda"
  only); ``host_backend`` lends that backend to "cpu" too, and, for a group made with
  ``backend="gloo"`` (registered for "cpu" only), lends it to "neuron": for the default group
  right after ``init_process_group``, for other groups as ``new_group`` makes them, so that
  CPU collectives on any group, and device ops that look the device's backend up
  (``batch_isend_irecv``), work from the start.
- NCCL needs CUDA devices: ``init_process_group("nccl")`` is refused with one line saying what
  to pass instead (otherwise torch fails later, on a CPU build with "Distributed package doesn't
  have NCCL built in", on a CUDA build at the first collective).
"""

from __future__ import annotations

import functools
from typing import Any

from neuron_profiler.errors import EmulatorError

DEVICE = "neuron"
NCCL_REFUSED = (
    "the emulated neuron device runs collectives over gloo: call "
    "torch.distributed.init_process_group() with no backend, or with backend='gloo'"
)
_original_init: list[Any] = []
_original_new_group: list[Any] = []


def _names_nccl_for_neuron(backend: Any) -> bool:
    """``"nccl"``, or a ``"device:backend"`` list that gives "neuron" NCCL, or gives NCCL
    without giving "cpu" (the host memory the collectives run on) gloo."""
    text = str(backend).lower().replace(" ", "")
    if ":" not in text:
        return text == "nccl"
    pairs = dict(p.split(":", 1) for p in text.split(",") if ":" in p)
    return pairs.get(DEVICE) == "nccl" or ("nccl" in pairs.values() and pairs.get("cpu") != "gloo")


def _init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
    if backend is not None and _names_nccl_for_neuron(backend):
        raise EmulatorError(NCCL_REFUSED)
    result = _original_init[0](backend, *args, **kwargs)
    import torch.distributed as dist

    host_backend(dist.group.WORLD)  # CPU collectives work from the start, as with "gloo"
    return result


def _new_group(*args: Any, **kwargs: Any) -> Any:
    group = _original_new_group[0](*args, **kwargs)
    host_backend(group)
    return group


def host_backend(pg: Any) -> None:
    """Give ``pg`` one gloo backend for both "cpu" and "neuron" when it has one for either only
    (the default backend registers it for "neuron", ``backend="gloo"`` for "cpu"): the emulated
    collective runs on the host memory, a CPU collective of the same group."""
    types = {d.type for d in getattr(pg, "_device_types", ())}  # (a rank outside a new group)
    if ("cpu" in types) == (DEVICE in types):
        return
    import torch
    from torch.distributed import ProcessGroup, ProcessGroupGloo

    has, lacks = ("cpu", DEVICE) if "cpu" in types else (DEVICE, "cpu")
    backend = pg._get_backend(torch.device(has))
    if isinstance(backend, ProcessGroupGloo):
        pg._register_backend(torch.device(lacks), ProcessGroup.BackendType.GLOO, backend)


def install() -> None:
    """Map "neuron" to gloo in torch's default-backend table and refuse NCCL (idempotent)."""
    import torch.distributed as dist

    if not dist.is_available() or _original_init:
        return
    from torch.distributed import distributed_c10d as c10d

    dist.Backend.default_device_backend_map[DEVICE] = dist.Backend.GLOO
    _original_init.append(c10d.init_process_group)
    wrapped = functools.wraps(c10d.init_process_group)(_init_process_group)
    c10d.init_process_group = wrapped
    dist.init_process_group = wrapped
    _original_new_group.append(c10d.new_group)
    grouped = functools.wraps(c10d.new_group)(_new_group)
    c10d.new_group = grouped
    dist.new_group = grouped
