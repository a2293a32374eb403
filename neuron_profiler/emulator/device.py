"""Registers the emulated "neuron" device with PyTorch and provides ``torch.neuron``.

    import neuron_profiler.emulator as emu
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)
    x = torch.randn(4, 4, device="neuron")          # unchanged GPU-style code from here on

PrivateUse1 is renamed to "neuron" through PyTorch's Python-backend hook. ``torch.neuron`` is
required (``torch.get_device_module``, tensor creation and autocast look it up). Factory ops reach
the device through a PrivateUse1 fallback; every op on a device tensor through its
``__torch_dispatch__``; both end in ``dispatch.execute``. Refuses when a real neuron backend
(torch-neuronx) or another PrivateUse1 backend owns the key.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import torch

from neuron_profiler.absent_device import drop_absent_device_module, holds_absent_device_module
from neuron_profiler.emulator import (
    autocast,
    collectives,
    compiled,
    copies,
    data_parallel,
    device_allocator,
    host_cost,
    memory_api,
    modelled,
    pinned,
    process_groups,
    serialization,
    storage,
    streams,
)
from neuron_profiler.emulator import dispatch as D
from neuron_profiler.emulator import tensor as T
from neuron_profiler.emulator.memory import ALLOCATOR
from neuron_profiler.emulator.runtime import get_runtime
from neuron_profiler.emulator.scheduler import DeviceTimeline
from neuron_profiler.emulator.timing import RooflineModel
from neuron_profiler.errors import CollectorUnavailableError, EmulatorError

_registered = False
_libraries: list[torch.library.Library] = []


def _check_no_real_backend() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if "torch_neuronx" in sys.modules:
        raise EmulatorError(
            "a real Neuron backend (torch_neuronx) is loaded in this process; "
            "the emulated device is not needed and cannot be enabled"
        )
    # Our collector may already have named PrivateUse1 "neuron" (it must, before profiling);
    # that is not a backend: a real one also installs the torch.neuron device module.
    named_by_collector = name == "neuron" and (
        not hasattr(torch, "neuron") or holds_absent_device_module("neuron")
    )
    if name != "privateuseone" and not named_by_collector:
        what = "a real 'neuron' backend" if name == "neuron" else f"the '{name}' backend"
        raise EmulatorError(
            f"PrivateUse1 is already registered to {what}; the emulated "
            "neuron device cannot be enabled in this process"
        )


class _EngineProbe(torch.autograd.Function):
    """A one-node graph on a device tensor that dispatches no op: its backward is routed to the
    autograd engine's queue for that device, which is all ``_check_autograd_engine`` asks."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        return T.NeuronTensor(torch.zeros(1), x._core)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> None:  # noqa: ARG004
        return None


def _check_autograd_engine(core: int) -> None:
    """PyTorch's autograd engine sizes its per-device queues once, at the first backward pass
    in the process, from the devices registered then: after a CPU backward has run, a later
    device has no queue and its first backward fails deep in engine.cpp (an internal assert).
    Found here, at ``enable()``, with a clear error instead."""
    x = T.NeuronTensor(torch.zeros(1), core).requires_grad_()
    try:
        torch.autograd.backward(_EngineProbe.apply(x), T.NeuronTensor(torch.ones(1), core))
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        raise EmulatorError(
            "a backward pass ran in this process before the emulated neuron device was "
            "enabled, and PyTorch's autograd engine sizes its device queues at the first one: "
            "call neuron_profiler.emulator.enable() (or set NEURON_PROFILER_EMULATE=1) before "
            "any backward pass"
        ) from None


def _device_index(device: Any) -> int:
    if device is None:
        return D.STATE.current_core
    if isinstance(device, int):
        return device
    idx = D.core_of(device)
    return D.STATE.current_core if idx is None else idx


class _DeviceContext:
    """``with torch.neuron.device(1):`` switches the current core."""

    def __init__(self, device: Any) -> None:
        self.idx = _device_index(device)

    def __enter__(self) -> None:
        self.prev = D.STATE.current_core
        D.STATE.current_core = self.idx

    def __exit__(self, *exc: object) -> None:
        D.STATE.current_core = self.prev


def _make_module() -> types.ModuleType:
    """The ``torch.neuron`` module: what GPU-style code calls on ``torch.cuda``."""
    mod = types.ModuleType("torch.neuron", "Emulated Neuron device (neuron_profiler.emulator).")

    def synchronize(device: Any = None) -> None:
        tl = D.STATE.timeline
        if tl is not None:
            cores = range(D.STATE.num_cores) if device is None else [_device_index(device)]
            tl.host_sync(list(cores), "synchronize", op="torch.neuron.synchronize")

    def set_device(device: Any) -> None:
        idx = _device_index(device)
        if not 0 <= idx < D.STATE.num_cores:
            raise RuntimeError(f"neuron:{idx} is not an emulated device")
        D.STATE.current_core = idx

    def manual_seed(seed: int) -> None:
        """The device's random ops draw from the host's default generator (so device results
        equal CPU's for a seed): seeding the device seeds that generator. Not through
        torch.manual_seed, which calls this back for the PrivateUse1 backend."""
        torch.default_generator.manual_seed(int(seed))

    def seed() -> None:
        torch.default_generator.seed()

    def get_device_properties(device: Any = None) -> dict:
        return get_runtime().device_properties()[_device_index(device)]

    funcs = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_in_bad_fork": lambda: False,
        "device_count": lambda: D.STATE.num_cores,
        "current_device": lambda: D.STATE.current_core,
        "set_device": set_device,
        "synchronize": synchronize,
        "device": _DeviceContext,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed,
        "seed": seed,
        "seed_all": seed,
        "initial_seed": torch.initial_seed,
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "get_amp_supported_dtype": lambda: [torch.bfloat16, torch.float16],
        "is_bf16_supported": lambda including_emulation=True: True,
        "get_device_name": lambda device=None: (
            f"NeuronCore {_device_index(device)} (emulated {get_runtime().chip.name})"
        ),
        "get_device_properties": get_device_properties,
        "emulated": True,
    }
    funcs.update(
        {
            "Stream": streams.Stream,
            "Event": streams.Event,
            "stream": streams.stream,
            "current_stream": streams.current_stream,
            "default_stream": streams.default_stream,
        }
    )
    for k, v in funcs.items():
        setattr(mod, k, v)
    memory_api.install(mod)
    return mod


def _factory_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    return D.execute_accounted(op, args, kwargs)


def _setup_backend(mod: types.ModuleType) -> bool:
    """torch's ``_setup_privateuseone_for_python_backend`` ("neuron", this module), with the
    memory extension's C++ hooks and device guard in place of its Python dummy ones where the
    extension loads. The hooks answer the same and also give C++ code a pinned allocator (DDP's
    reducer stages its used-parameter map there with ``find_unused_parameters`` or
    ``static_graph``). The guard answers the same without calling Python: torch's calls Python
    from the noexcept ``exchangeStream``, and a backward hook's exception, unwinding through
    autograd's engine, ended the process there (std::terminate) instead of reaching the caller.
    Without the extension (no compiler) torch's Python ones are registered, and that abort
    remains (docs/emulator.md). True: the C++ guard is registered (a backward hook's exception
    reaches the caller)."""
    from torch.utils import backend_registration as B

    torch.utils.rename_privateuse1_backend("neuron")
    torch.utils.generate_methods_for_privateuse1_backend()
    drop_absent_device_module("neuron")  # the collector's stand-in, if NEURON was asked first
    torch._register_device_module("neuron", mod)
    ext = _extension()
    if ext is None or not ext.install_hooks():
        torch._C._acc.register_python_privateuseone_hook(B._DummyPrivateUse1Hook())
    if ext is not None and ext.install_device_guard():
        return True
    torch._C._acc.register_python_privateuseone_device_guard(B._DummyDeviceGuard())
    return False


def _extension() -> types.ModuleType | None:
    """The memory extension, None where it cannot be built or loaded (no compiler: said once on
    stderr by device_allocator)."""
    from neuron_profiler.emulator import native

    try:
        return native.load_native()
    except CollectorUnavailableError:
        return None


def _register_with_torch(cores: int) -> None:
    global _registered
    _check_no_real_backend()
    mod = _make_module()
    hook_errors_reach_caller = _setup_backend(mod)
    sys.modules["torch.neuron.memory"] = mod.memory
    T.set_executor(D.execute_accounted, cores)
    copies.register()
    collectives.register()
    process_groups.install()  # init_process_group(): gloo by default, NCCL refused
    fallback_lib = torch.library.Library("_", "IMPL")
    fallback_lib.fallback(_factory_fallback, "PrivateUse1")
    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten
    for name, op in (
        ("_to_copy", aten._to_copy.default),
        ("copy_", aten.copy_.default),
        ("_copy_from", aten._copy_from.default),
        ("_copy_from_and_resize", aten._copy_from_and_resize.default),
    ):
        lib.impl(name, (lambda o: lambda *a, **k: D.execute(o, a, k))(op), "PrivateUse1")
    _libraries.extend([fallback_lib, lib, pinned.register()])
    autocast.register()
    compiled.install()  # torch.compile: Dynamo skips the emulator; the "neuron" backend
    data_parallel.install()  # nn.DataParallel: comm's CUDA-only functions, replicas in turn
    serialization.install()  # torch.save / torch.load of device tensors, map_location="neuron"
    # ``t.data = x`` across host and device (FSDP moving parameters), and module conversion by it
    storage.install(refuse_stale_backward=hook_errors_reach_caller)
    device_allocator.install()  # torch.accelerator.memory (one line on stderr where unavailable)
    from torch.optim import optimizer

    if T.NeuronTensor not in optimizer._foreach_supported_types:
        optimizer._foreach_supported_types.append(T.NeuronTensor)
    _registered = True
    # The NEURON collector registered, as a real device's plugin is once imported: a profile
    # asking for ProfilerActivity.PrivateUse1 gets the device's rows without importing NEURON.
    # Importing registration runs the collectors package, which registers at import and never
    # fails (without a bridge, asking for NEURON says why).
    import neuron_profiler.collectors.registration  # noqa: F401


ENV_NUMERICS = "NEURON_PROFILER_EMULATE_NUMERICS"
ENV_QUEUE_DEPTH = "NEURON_PROFILER_EMULATE_QUEUE_DEPTH"


def _env_numerics() -> bool:
    """``NEURON_PROFILER_EMULATE_NUMERICS=0`` (or false/no/off) selects timing mode."""
    raw = os.environ.get(ENV_NUMERICS, "1").strip().lower()
    return raw not in ("0", "false", "no", "off")


def _env_queue_depth() -> int | None:
    raw = os.environ.get(ENV_QUEUE_DEPTH, "").strip()
    return int(raw) if raw else None


def enable(
    cores: int = 2,
    chip: str = "trn2",
    speed_factor: float = 1.0,
    *,
    numerics: bool | None = None,
    queue_depth: int | None = None,
) -> None:
    """Register the emulated neuron device (idempotent; later calls may change cores, chip,
    speed factor, numerics and queue depth; queue clocks carry over).

    ``numerics=False`` is timing mode: large device ops produce outputs of the right shape, dtype
    and device without computing them, small ones are computed (``outputs.py``: the rule); a
    read of modelled values warns once per op (``modelled.py``). None reads
    ``NEURON_PROFILER_EMULATE_NUMERICS`` (default: numerics on). ``queue_depth``: operations in
    flight per core before the host blocks (None: ``NEURON_PROFILER_EMULATE_QUEUE_DEPTH``, else
    the chip table's ``launch_queue_depth``).

    Raises ``EmulatorError`` when a real neuron backend (or any other PrivateUse1 backend) is
    registered or when a backward pass ran in this process before the first ``enable()``
    (autograd's engine would have no queue for the device), ``ValueError`` for bad arguments.
    """
    numerics = _env_numerics() if numerics is None else bool(numerics)
    queue_depth = _env_queue_depth() if queue_depth is None else queue_depth
    rt = get_runtime()
    rt.configure(cores, chip, speed_factor, numerics=numerics)
    model = RooflineModel(rt.chip, speed_factor=float(speed_factor))
    if not _registered:
        _register_with_torch(cores)
    T.set_executor(D.execute_accounted, cores)
    if cores > 1:  # the device guard reports one device: keep autograd on one thread
        torch.autograd.set_multithreading_enabled(False)
    _check_autograd_engine(cores - 1)
    old = D.STATE.timeline
    if old is not None:  # its pending collectives, resolved on the queues carried over
        old.settle()
    timeline = DeviceTimeline(rt, model, cores, queue_depth=queue_depth)
    if old is not None:  # keep the queues' clocks: work already in flight stays in flight
        timeline.cores[: min(cores, len(old.cores))] = old.cores[:cores]
        timeline.last_of_group = old.last_of_group  # a peer's next collective may follow one
    D.STATE.num_cores = cores
    D.STATE.numerics = bool(numerics)
    modelled.reset()  # timing mode warns again, once per op, about reads of modelled values
    D.STATE.current_core = min(D.STATE.current_core, cores - 1)
    D.STATE.timeline = timeline
    ALLOCATOR.configure(cores, timeline)
    if host_cost.LEDGER.boundary is None:  # once per process, before any trace (host_cost.py)
        host_cost.LEDGER.boundary = host_cost.calibrate(
            D.execute, lambda t: T.NeuronTensor(t, 0), T.swap_executor
        )


def is_enabled() -> bool:
    return _registered
