"""The single execution point of the emulated device: every aten/c10d op on ``neuron`` comes here.

``execute(func, args, kwargs)`` unwraps the device tensors, runs the op on their CPU memory (with
record-function off, so torch.profiler shows each user op once), wraps the results, and tells the
``DeviceTimeline`` what the device would have done: a kernel (roofline cost from ``costs``), a DMA
copy, a host sync, a CPU fallback (``fallback``), or a collective (``collectives``). Per-op facts
(name, kind, mutated arguments, fallback) are computed once per overload and cached. In timing
mode large ops are modelled instead of run (``outputs``: the rule, zero-filled outputs), and
``modelled`` tracks which device tensors hold modelled values and warns when they are read.
Ops whose only kernel is CUDA's (the fused RNN cells) run ``host_ops``' host implementation;
outputs that ATen puts on the host (``batch_sizes`` of a packed sequence) stay host tensors
(``host_outputs``); a nested result is held on the host behind a device tensor.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import profiler as _autograd_profiler

from neuron_profiler.emulator import fallback as fb
from neuron_profiler.emulator import host_cost, modelled
from neuron_profiler.emulator import scheduler as sched
from neuron_profiler.emulator.costs import op_cost
from neuron_profiler.emulator.host_ops import HOST_KERNELS
from neuron_profiler.emulator.memory import ALLOCATOR
from neuron_profiler.emulator.outputs import (
    ALLOC_OPS,
    ZEROS_OPS,
    computes_for_real,
    materialise,
    materialised,
    timing_plan,
)
from neuron_profiler.emulator.scheduler import DeviceTimeline, PendingCollective
from neuron_profiler.emulator.tensor import NeuronTensor
from neuron_profiler.errors import EmulatorError
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.trace import vocabulary as V

aten = torch.ops.aten
_set_record_function = torch._C._autograd._enable_record_function


class Kind(enum.Enum):
    META = "meta"  # size/stride queries: answered from the held tensor, nothing recorded
    VIEW = "view"  # views and aliases: metadata on the device, no kernel
    ALLOC = "alloc"  # empty*: allocates, no kernel
    KERNEL = "kernel"  # runs on the compute queue
    SPECIAL = "special"  # copies, item, collectives: own handler


@dataclass(frozen=True)
class OpInfo:
    name: str  # overload packet, e.g. "aten::add"
    kind: Kind
    mutated_positions: tuple[int, ...]
    mutated_names: tuple[str, ...]
    handler: Callable[..., Any] | None = None
    fallback: bool = False  # in the fallback set (cache dropped when the set changes)
    # computes the op on host tensors: the op itself, or host_ops' kernel where ATen has only
    # a CUDA one (the fused RNN cells); None: the op itself (OpInfo built elsewhere)
    run: Callable[..., Any] | None = None
    # the op's Generator argument: (position, or -1 when keyword-only; name); None: it has none
    generator: tuple[int, str] | None = None


class State:
    """What ``enable`` sets up: the timeline, the core count and the (process-wide) current core."""

    def __init__(self) -> None:
        self.timeline: DeviceTimeline | None = None
        self.num_cores = 0
        self.current_core = 0
        # False: timing mode (outputs of the right shape, not computed; outputs.py)
        self.numerics = True
        # storage data_ptr -> host-clock ns at which a collective finishes writing it, or the
        # collective itself while its group start is not known (wait_pending resolves it)
        self.pending: dict[int, int | PendingCollective] = {}
        # CPU-fallback ops run so far (their host time is real on a device too: host_cost.py)
        self.fallbacks = 0
        # (core, stream id) of the current side stream (streams.py), None on the default one
        self.side_stream: tuple[int, int] | None = None


STATE = State()
_INFO: dict[Any, OpInfo] = {}
_SPECIAL: dict[Any, Callable[..., Any]] = {}
_META_OPS = {
    aten.sym_size.default,
    aten.sym_size.int,
    aten.sym_stride.default,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten.dim.default,
    aten.sym_storage_offset.default,
    aten.is_contiguous.default,
    aten.is_contiguous.memory_format,
    aten.is_strides_like_format.default,
    aten.is_non_overlapping_and_dense.default,
    aten.size.default,
    aten.size.int,
    aten.stride.default,
    aten.stride.int,
    aten.storage_offset.default,
    aten.numel.default,
    # shapes only (forward-mode autograd asks it of every tangent): no kernel, no host read
    aten.is_same_size.default,
}


def register_special(op: Any, handler: Callable[..., Any]) -> None:
    _SPECIAL[op] = handler
    _INFO.pop(op, None)


def _describe(func: Any) -> OpInfo:
    name = func._overloadpacket._qualified_op_name
    positions, names = [], []
    generator = None
    for i, arg in enumerate(func._schema.arguments):
        if "Generator" in str(arg.type):
            generator = (-1 if arg.kwarg_only else i, arg.name)
        if arg.alias_info is not None and arg.alias_info.is_write:
            names.append(arg.name)
            if not arg.kwarg_only:
                positions.append(i)
    handler = _SPECIAL.get(func)
    if handler is not None:
        kind = Kind.SPECIAL
    elif func in _META_OPS:
        kind = Kind.META
    elif name in ALLOC_OPS:
        kind = Kind.ALLOC
    elif ((func.is_view or name in V.NO_KERNEL_OPS) and not positions) or (
        torch.Tag.inplace_view in func.tags
    ):  # t_, unsqueeze_, ...: metadata only
        kind = Kind.VIEW
    else:
        kind = Kind.KERNEL
    info = OpInfo(
        name,
        kind,
        tuple(positions),
        tuple(names),
        handler,
        kind is Kind.KERNEL and fb.is_fallback_op(name),
        HOST_KERNELS.get(func, func),
        generator,
    )
    _INFO[func] = info
    return info


def _clear_cache() -> None:
    _INFO.clear()


fb.on_change(_clear_cache)


# -- unwrapping -----------------------------------------------------------------------------
class Unwrapped:
    """Arguments with device tensors replaced by their CPU memory, and what was found."""

    __slots__ = ("core", "inputs", "alias", "args", "kwargs", "device_kw", "host")

    def __init__(self) -> None:
        self.core: int | None = None
        self.inputs: list[torch.Tensor] = []  # every tensor read (device memory or host)
        self.alias: dict[int, NeuronTensor] = {}  # id(elem) -> its wrapper
        self.device_kw: bool = False
        # a host tensor of one or more dimensions is an argument (not a CPU scalar): the op may
        # be one that ATen lets take host tensors and give some back (``host_outputs``)
        self.host: bool = False

    def take(self, x: Any) -> Any:
        if isinstance(x, NeuronTensor):
            elem = x._elem
            if self.core is None:
                self.core = x._core
            elif self.core != x._core:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at "
                    f"least two devices, neuron:{self.core} and neuron:{x._core}!"
                )
            self.inputs.append(elem)
            self.alias[id(elem)] = x
            return elem
        if type(x) is list or type(x) is tuple:
            return type(x)([self.take(i) for i in x])
        if isinstance(x, torch.Tensor):
            self.inputs.append(x)
            if x.dim():
                self.host = True
        return x


def core_of(device: Any) -> int | None:
    """Core index of a device argument, None when it is not the neuron device."""
    if device is None:
        return None
    dev = device if isinstance(device, torch.device) else torch.device(device)
    if dev.type != "neuron":
        return None
    idx = STATE.current_core if dev.index is None else dev.index
    if not 0 <= idx < STATE.num_cores:
        raise RuntimeError(
            f"neuron:{idx} is not an emulated device (enabled with {STATE.num_cores} cores)"
        )
    return idx


def unwrap(args: tuple, kwargs: dict) -> Unwrapped:
    u = Unwrapped()
    take = u.take
    u.args = tuple([take(a) for a in args])
    ukw = {}
    for k, v in kwargs.items():
        if k == "device":
            c = core_of(v)
            if c is not None:
                if u.core is None:
                    u.core = c
                u.device_kw = True
                v = torch.device("cpu")
        ukw[k] = u.take(v)
    u.kwargs = ukw
    return u


def run_inner(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run an op on host tensors without a second record-function entry (profiler dedup)."""
    _set_record_function(False)
    try:
        return func(*args, **kwargs)
    finally:
        _set_record_function(True)


def run_inner_on_device(func: Any, args: tuple, kwargs: dict) -> Any:
    """``run_inner`` for an op whose new outputs are device buffers: while a profile records
    memory, the CPU allocator does not report them as host memory (memory.py reports them)."""
    quiet = _autograd_profiler._is_profiler_enabled and ALLOCATOR.host_reports_off()
    try:
        return run_inner(func, args, kwargs)
    finally:
        if quiet:
            ALLOCATOR.host_reports_on()


# -- wrapping -------------------------------------------------------------------------------
_STRIDED = torch.strided
SPARSE_LAYOUTS = frozenset(
    (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
)
# A wrapper subclass cannot have a compressed layout: torch asks a compressed tensor's layout
# from its SparseCsrTensorImpl, which a wrapper is not ("layout_impl is only implemented for
# TensorImpl subclasses" at the first to_dense)
COMPRESSED_UNSUPPORTED = (
    "sparse compressed layouts (CSR, CSC, BSR, BSC) are not supported by the emulated neuron "
    "device: use COO on the device (t.to_sparse()), or keep the tensor on the CPU"
)


def new_device_tensor(elem: torch.Tensor, core: int, allocate: bool) -> NeuronTensor:
    """Wrap ``elem`` on ``core``; ``allocate``: a fresh output, whose buffer the device
    allocator accounts (memory.py) until this tensor dies."""
    layout = elem.layout
    if layout is not _STRIDED and layout in SPARSE_LAYOUTS:
        if layout is not torch.sparse_coo:
            raise EmulatorError(f"{layout}: {COMPRESSED_UNSUPPORTED}")
        return NeuronTensor.holding_sparse(elem, core)  # its memory is not accounted (docs)
    try:
        t = NeuronTensor(elem, core)
    except RuntimeError:  # a nested tensor has no sizes: held on the host (tensor.py)
        if not elem.is_nested:
            raise
        t = run_inner_on_device(NeuronTensor.holding_nested, (elem, core), {})  # no host rows
    if allocate:
        nbytes = elem.numel() * elem.element_size()  # a fresh output owns exactly this
        if nbytes:
            ALLOCATOR.allocate(t, core, nbytes, elem.data_ptr())
    return t


def wrap(out: Any, u: Unwrapped, core: int, allocate: bool, written: list[torch.Tensor]) -> Any:
    """CPU results -> device tensors; results that are an input's memory return its wrapper."""
    if isinstance(out, torch.Tensor):
        same = u.alias.get(id(out))
        if same is not None:
            written.append(out)
            return same
        written.append(out)
        return new_device_tensor(out, core, allocate)
    if type(out) is list or type(out) is tuple:
        return type(out)([wrap(o, u, core, allocate, written) for o in out])
    return out


# (op, which of its tensor arguments are on the host) -> indices of the output tensors that
# ATen puts on the host for those arguments (empty: none)
_HOST_OUTPUTS: dict[tuple, frozenset[int]] = {}


def host_outputs(func: Any, run: Callable[..., Any], u: Unwrapped) -> frozenset[int]:
    """Which of the op's output tensors (in order, nested lists flattened) ATen leaves on the host
    when its device arguments are on a device and its host ones on the host:
    ``_pack_padded_sequence``'s ``batch_sizes``, ``_pad_packed_sequence``'s lengths. Found once
    per op and pattern of host arguments by running it with the device arguments on the meta
    device (an op that cannot run there keeps every output on the device, as before)."""
    key = (func, tuple([id(t) in u.alias for t in u.inputs]), u.device_kw)
    found = _HOST_OUTPUTS.get(key)
    if found is None:
        memo: dict[int, torch.Tensor] = {}
        try:
            args = tuple([_on_meta(a, u, memo) for a in u.args])
            kwargs = {k: _on_meta(v, u, memo) for k, v in u.kwargs.items()}
            if u.device_kw:
                kwargs["device"] = torch.device("meta")
            out = run_inner(run, args, kwargs)
        except Exception:  # no meta kernel, data-dependent, ...: every output on the device
            found = frozenset()
        else:
            leaves = _tensors(out)
            found = frozenset(i for i, t in enumerate(leaves) if t.device.type == "cpu")
        _HOST_OUTPUTS[key] = found
    return found


def _on_meta(x: Any, u: Unwrapped, memo: dict[int, torch.Tensor]) -> Any:
    """``x`` with the device arguments' memory replaced by meta tensors of its layout."""
    if isinstance(x, torch.Tensor):
        if id(x) not in u.alias:
            return x
        m = memo.get(id(x))
        if m is None:
            m = memo[id(x)] = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return m
    if type(x) is list or type(x) is tuple:
        return type(x)([_on_meta(i, u, memo) for i in x])
    return x


def wrap_mixed(
    out: Any,
    u: Unwrapped,
    core: int,
    allocate: bool,
    written: list[torch.Tensor],
    host: frozenset[int],
    index: list[int],
) -> Any:
    """``wrap``, leaving the output tensors whose indices are in ``host`` host tensors."""
    if isinstance(out, torch.Tensor):
        i = index[0]
        index[0] = i + 1
        return out if i in host else wrap(out, u, core, allocate, written)
    if type(out) is list or type(out) is tuple:
        return type(out)([wrap_mixed(o, u, core, allocate, written, host, index) for o in out])
    return out


def _has_tensor(out: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    if type(out) is list or type(out) is tuple:
        return any(_has_tensor(o) for o in out)
    return False


def wait_pending(inputs: list[torch.Tensor]) -> int:
    """Device time at which collectives writing any of these inputs finish (0: none pending).
    A collective not resolved yet is resolved here: the op reading its output needs its end."""
    pending = STATE.pending
    if not pending:
        return 0
    ready = 0
    for t in inputs:
        ptr = t.untyped_storage().data_ptr()
        r = pending.get(ptr)
        if r is None:
            continue
        if type(r) is not int:
            if r.data_ready is not None:  # its values first (no lock held here)
                r.data_ready()
                r.data_ready = None
            r = pending[ptr] = r.end_ns()
        if r > ready:
            ready = r
    return ready


def prune_pending(core: int) -> None:
    tl = STATE.timeline
    if STATE.pending and tl is not None:
        floor = tl.cores[core].stream_ns
        pending = STATE.pending
        for k in [k for k, v in pending.items() if (v if type(v) is int else v.end) <= floor]:
            del pending[k]


# -- the execution point ----------------------------------------------------------------------
def execute_accounted(func: Any, args: tuple, kwargs: dict) -> Any:
    """The execution point as installed: ``execute``, and while a trace captures, the emulator's
    host time beyond the modelled framework launch cost as an overhead span (host_cost.py).
    Copies, reads and collectives (their own host model), CPU fallbacks and ops that waited for
    the modelled device keep their host time."""
    tl = STATE.timeline
    if tl is None or not tl.rt.capturing:
        return execute(func, args, kwargs)
    fallbacks, waits = STATE.fallbacks, sched.waits
    begin = time.time_ns()
    result = execute(func, args, kwargs)
    end = time.time_ns()
    info = _INFO.get(func)
    kind = info.kind if info is not None else Kind.SPECIAL
    if kind is Kind.SPECIAL or fallbacks != STATE.fallbacks or waits != sched.waits:
        host_cost.skip()
    else:
        launches = kind is Kind.KERNEL
        host_cost.account(tl, STATE.current_core, info.name, launches, begin, end)  # type: ignore[union-attr]
    return result


def execute(func: Any, args: tuple, kwargs: dict) -> Any:
    info = _INFO.get(func) or _describe(func)
    kind = info.kind
    if kind is Kind.META:
        return func(*[a._elem if isinstance(a, NeuronTensor) else a for a in args], **kwargs)
    if kind is Kind.SPECIAL:
        if STATE.numerics:
            return info.handler(func, info, args, kwargs)  # type: ignore[misc]
        return _special_timing(func, info, args, kwargs)
    if info.generator is not None:
        pos, name = info.generator
        gen = args[pos] if 0 <= pos < len(args) else kwargs.get(name)
        if gen is not None and gen.device.type == "neuron":
            return _on_host_generator(func, args, kwargs, gen, pos, name)
    launch_ns = time.time_ns()
    u = unwrap(args, kwargs)
    if STATE.pending:  # a collective writing an input: resolved (its data there) before the math
        wait_pending(u.inputs)
    core = u.core if u.core is not None else STATE.current_core
    timing = not STATE.numerics
    # timing mode: the op whose modelled values the inputs hold (modelled.py), None: all real
    seen = modelled.origin(u.alias.values()) if timing and u.alias else None
    if kind is Kind.KERNEL and u.alias:
        reason = fallback_reason(info, u)
        if reason is not None:
            if seen is not None:  # nonzero, unique, ...: their result depends on the values
                _warn_read(seen, info.name, core)
            result = run_fallback(func, info, u, core, reason)
            modelled.mark(result, seen)
            return result
    computed = True
    math_ns = launch_ns  # numerics mode: the overhead span is the whole op up to its launch
    math_end_ns = 0
    # run_inner_on_device, inlined on the hot path
    quiet = _autograd_profiler._is_profiler_enabled and ALLOCATOR.host_reports_off()
    _set_record_function(False)
    try:
        if timing and (kind is Kind.KERNEL or kind is Kind.ALLOC):
            out, computed, seen, plan = _timing_plan(func, info, u, seen)
            if computed:  # timing mode: the span is the math alone, timed in this frame
                math_ns = time.time_ns()
                out, computed = _compute_timing(func, info, u, seen, plan)
                math_end_ns = time.time_ns()
        else:
            out = info.run(*u.args, **u.kwargs)  # type: ignore[misc]
    finally:
        _set_record_function(True)
        if quiet:
            ALLOCATOR.host_reports_on()
    written: list[torch.Tensor] = []
    host = host_outputs(func, info.run or func, u) if u.host else None
    if host:
        result = wrap_mixed(out, u, core, kind is not Kind.VIEW, written, host, [0])
    else:
        result = wrap(out, u, core, kind is not Kind.VIEW, written)
    if seen is not None:  # its outputs, and the inputs it wrote, hold modelled values
        modelled.mark(result, seen)
        if info.mutated_names:
            modelled.mark([u.alias[id(t)] for t in _mutated_elems(info, u)], seen)
    if kind is Kind.KERNEL:
        if computed:  # the host's math is emulator overhead; the launch starts after it
            end = math_end_ns or time.time_ns()
            _launch_kernel(
                info,
                u,
                core,
                written,
                end,
                overhead_from_ns=math_ns,
                call_end_ns=time.time_ns(),
            )
        else:
            _launch_kernel(info, u, core, written, launch_ns, call_end_ns=time.time_ns())
        if not written and u.alias and not info.mutated_names:
            STATE.timeline.host_sync([core], "host_read", op=info.name)  # type: ignore[union-attr]
    return result


def _on_host_generator(
    func: Any, args: tuple, kwargs: dict, gen: torch.Generator, pos: int, name: str
) -> Any:
    """A random op given a ``torch.Generator(device="neuron")``: run on the host (as every
    device op) with a host generator holding its state, which then goes back to it, so the
    device generator advances as the draws did (seeded, it gives CPU's values for that seed)."""
    host = torch.Generator()
    host.set_state(gen.get_state())
    if 0 <= pos < len(args):
        args = (*args[:pos], host, *args[pos + 1 :])
    else:
        kwargs = {**kwargs, name: host}
    try:
        return execute(func, args, kwargs)
    finally:
        gen.set_state(host.get_state())


def _timing_plan(
    func: Any, info: OpInfo, u: Unwrapped, seen: str | None
) -> tuple[Any, bool, str | None, Any]:
    """Timing mode's kernels and allocations: (the modelled outputs, or None when they are to
    be computed; whether they are; the op whose modelled values they hold; the plan). Small
    ops are computed for real (``outputs.computes_for_real``, by ``_compute_timing``), large
    ones materialised as zeros; allocations are zeros (their defined value, not a modelled
    one). Only the math is emulator overhead: the op's dispatch stays launch time, as for a
    modelled op; ``execute`` times the math in its own frame, so that the overhead span and the
    launch row after it nest among with_stack's frames."""
    run = info.run or func
    for t in u.inputs:  # a sparse input: its indices are data (as nonzero's), computed for real
        if t.layout is not _STRIDED:
            plan = None
            break
    else:
        plan = timing_plan(func, u.args, u.kwargs, u.inputs, run=run)
    if plan is not None and not plan.real:
        out = materialise(plan, u.inputs)[0]
        if seen is None and info.kind is Kind.KERNEL and info.name not in ZEROS_OPS:
            seen = info.name  # a chain is named after its first modelled op
        return out, False, seen, plan
    if plan is None and seen is not None:  # its shape or host value depends on the values
        modelled.warn_read(seen, info.name)
    return None, True, seen, plan


def _compute_timing(
    func: Any, info: OpInfo, u: Unwrapped, seen: str | None, plan: Any
) -> tuple[Any, bool]:
    """The op computed for real in timing mode: (outputs, whether computed)."""
    try:
        return (info.run or func)(*u.args, **u.kwargs), True
    except Exception:
        if plan is None or seen is None:
            raise
        # computed on modelled zeros it fails (multinomial of zero probabilities): model it
        modelled.warn_read(seen, f"{info.name} (which fails on zeros, so it is modelled too)")
        return materialise(plan, u.inputs)[0], False


# Ops that only move device memory into other device memory, with the argument holding what
# they read: the DMA engines copy it (as ``copy_`` between device tensors), not a compute
# engine. FSDP's all-gather copy-in / copy-out and reduce-scatter copy-in are these; on their own
# streams they run beside the compute queue.
DEVICE_COPIES = {
    "fsdp::all_gather_copy_in": 0,
    "fsdp::split_with_sizes_copy": 0,
    "fsdp::chunk_cat": 0,
    "aten::_foreach_copy_": 1,
    "aten::split_with_sizes_copy": 0,
}


def _arg_bytes(args: tuple, index: int) -> int:
    found = args[index] if len(args) > index else []
    found = found if isinstance(found, (list, tuple)) else [found]
    return sum(t.numel() * t.element_size() for t in found if isinstance(t, torch.Tensor))


def stream_of(core: int) -> int:
    """Id of the current stream on ``core`` (0: the default stream; streams.py)."""
    side = STATE.side_stream
    return side[1] if side is not None and side[0] == core else 0


def _launch_kernel(
    info: OpInfo,
    u: Unwrapped,
    core: int,
    written: list[torch.Tensor],
    launch_ns: int,
    overhead_from_ns: int = 0,
    call_end_ns: int | None = None,
) -> None:
    """The op's device work on the timeline. ``call_end_ns``: where its runtime call's row
    ends, read by the caller before this frame opens, so that the row nests among the host's
    Python frames (with_stack) instead of ending inside the ones that schedule it."""
    tl = STATE.timeline
    if tl is None:
        return
    stream = stream_of(core)
    source = DEVICE_COPIES.get(info.name)
    if source is not None:  # a device-to-device copy: the DMA engines move it
        if overhead_from_ns:
            tl.overhead(core, info.name, F.OVERHEAD_NUMERICS, overhead_from_ns, launch_ns)
        tl.copy(
            core,
            F.D2D,
            _arg_bytes(u.args, source),
            launch_ns=launch_ns,
            op=info.name,
            not_before_ns=wait_pending(u.inputs),
            stream=stream,
        )
        if STATE.pending:
            prune_pending(core)
        return
    # the inputs the op's schema marks written (self of add_, not its other operand)
    mutated = _mutated_elems(info, u) if info.mutated_names else []
    cost = op_cost(info.name, inputs=u.inputs, outputs=written or mutated, args=u.args)
    tl.kernel(
        core,
        info.name,
        flops=cost.flops,
        bytes_moved=cost.bytes_moved,
        dtype=cost.dtype,
        matrix=cost.matrix,
        launch_ns=launch_ns,
        not_before_ns=wait_pending(u.inputs),
        overhead_from_ns=overhead_from_ns,
        stream=stream,
        call_end_ns=call_end_ns,
    )
    if STATE.pending:
        prune_pending(core)


# -- timing mode's copies, reads and collectives --------------------------------------------------
_COPY_INTO = {  # op -> (position of the destination, position of the source)
    aten.copy_.default: (0, 1),
    aten._copy_from.default: (1, 0),
    aten._copy_from_and_resize.default: (1, 0),
}


def _host_reader(func: Any, args: tuple, kwargs: dict) -> str | None:
    """How this special op reads device values on the host (None: it does not)."""
    if func is aten._local_scalar_dense.default:
        return ".item()"
    if func is aten._to_copy.default:
        device = kwargs.get("device")
        if device is not None and core_of(device) is None and isinstance(args[0], NeuronTensor):
            return "a copy to the host (aten::_to_copy)"
        return None
    where = _COPY_INTO.get(func)
    if where is not None:
        dst, src = args[where[0]], args[where[1]]
        if isinstance(src, NeuronTensor) and not isinstance(dst, NeuronTensor):
            return f"a copy to the host ({func._overloadpacket._qualified_op_name})"
    return None


def _device_tensors(x: Any) -> list[NeuronTensor]:
    if isinstance(x, NeuronTensor):
        return [x]
    if type(x) is list or type(x) is tuple:
        return [t for i in x for t in _device_tensors(i)]
    return []


def _warn_read(seen: str, reader: str, core: int) -> None:
    """``modelled.warn_read`` where the op keeps its host time (a read, a copy, a CPU fallback:
    not accounted by ``host_cost``): showing the warning (once per op; Python formats it and
    reads the program's source line, ~ms) is the emulator's own work, an overhead span."""
    start = time.time_ns()
    modelled.warn_read(seen, reader)
    stop = time.time_ns()
    tl = STATE.timeline
    if tl is not None and stop - start >= _WARNING_SPAN_MIN_NS:
        tl.overhead(core, reader, F.OVERHEAD_WARNING, start, stop)


_WARNING_SPAN_MIN_NS = 20_000  # a read counted without a warning costs ~1 us: no span for it


def _special_timing(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    """A copy, read or collective in timing mode: its handler, plus what modelled.py tracks
    (a host read of modelled values warns; results carry their source's modelled op)."""
    where = _COPY_INTO.get(func)
    if where is not None:  # only the source's values are read
        dst, src = args[where[0]], args[where[1]]
        seen = src._modelled if isinstance(src, NeuronTensor) else None
    else:
        seen = modelled.origin(_device_tensors(args))
    if seen is not None:
        reader = _host_reader(func, args, kwargs)
        if reader is not None:
            _warn_read(seen, reader, STATE.current_core)
    before = materialised()
    result = info.handler(func, info, args, kwargs)  # type: ignore[misc]
    if where is not None:
        if isinstance(dst, NeuronTensor):  # overwritten: the source's values, or the copy's
            if seen is None and isinstance(src, NeuronTensor):  # device -> device (copies.py)
                if not computes_for_real(info.name, [src._elem], [dst._elem]):
                    seen = info.name
            dst._modelled = seen
        return result
    if seen is None and materialised() != before:  # copies.py modelled it (a large cast)
        seen = info.name
    modelled.mark(result, seen)
    return result


# -- CPU fallback -----------------------------------------------------------------------------
def fallback_reason(info: OpInfo, u: Unwrapped) -> str | None:
    if info.kind is not Kind.KERNEL or not u.alias:
        return None
    if info.fallback:
        return fb.REASON_UNSUPPORTED
    f64 = torch.float64
    for t in u.inputs:
        if t.dtype is f64:
            return fb.REASON_FLOAT64
    return None


def _mutated_elems(info: OpInfo, u: Unwrapped) -> list[torch.Tensor]:
    found: list[Any] = [u.args[i] for i in info.mutated_positions if i < len(u.args)]
    found += [u.kwargs[n] for n in info.mutated_names if n in u.kwargs]
    flat: list[torch.Tensor] = []
    for x in found:
        flat.extend(x if isinstance(x, (list, tuple)) else [x])
    return [t for t in flat if isinstance(t, torch.Tensor) and id(t) in u.alias]


def run_fallback(func: Any, info: OpInfo, u: Unwrapped, core: int, reason: str) -> Any:
    """TorchNeuron's cpu_fallback: inputs to host, run there, write mutated inputs back,
    outputs to device; each copy is a modelled DMA, the host compute is real time. The
    ``CPU fallback`` row begins when this frame opens and each copy's call row ends in the
    frame that began it (``DeviceTimeline.kernel``, ``call_end_ns``): they nest among
    with_stack's Python frames."""
    launch_ns = time.time_ns()
    tl = STATE.timeline
    assert tl is not None
    fb.note_fallback(info.name)
    STATE.fallbacks += 1
    device_inputs = [t for t in u.inputs if id(t) in u.alias]
    last = wait_pending(device_inputs)
    for t in device_inputs:
        last = tl.copy(
            core,
            F.D2H,
            t.numel() * t.element_size(),
            launch_ns=time.time_ns(),
            op=info.name,
            not_before_ns=last,
            call_end_ns=time.time_ns(),
        )
    tl.host_sync([core], "fallback", op=info.name, until_ns=last)
    host = {id(t): t.clone() for t in device_inputs}
    args = _swap(u.args, host)
    kwargs = {k: _swap(v, host) for k, v in u.kwargs.items()}
    out = run_inner(info.run or func, args, kwargs)
    host_by_id = {id(h): h for h in host.values()}
    back = {id(host[id(dev)]): dev for dev in _mutated_elems(info, u)}  # host id -> device
    for h_id, dev in back.items():
        h = host_by_id[h_id]
        if dev.shape != h.shape:
            dev.resize_(h.shape)
        dev.copy_(h)
        nbytes = h.numel() * h.element_size()
        tl.copy(
            core,
            F.H2D,
            nbytes,
            launch_ns=time.time_ns(),
            op=info.name,
            call_end_ns=time.time_ns(),
        )
    result = _wrap_fallback(out, u, core, back, tl, info.name)
    # what the op would have cost on the device (the analyzer's native time): the kernel cost
    # rule on the host inputs and results, bytes = every tensor read plus every tensor written
    host_inputs = [_swap(t, host) for t in u.inputs]
    cost = op_cost(
        info.name,
        inputs=host_inputs,
        outputs=_tensors(out) or [host_by_id[h] for h in back],
        args=args,
    )
    tl.fallback(
        core,
        info.name,
        reason=reason,
        shapes=[list(t.shape) for t in device_inputs],
        dtypes=[str(t.dtype).removeprefix("torch.") for t in device_inputs],
        cost=cost,
        start_ns=launch_ns,
        stop_ns=time.time_ns(),
    )
    return result


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if type(x) is list or type(x) is tuple:
        return [t for i in x for t in _tensors(i)]
    return []


def _swap(x: Any, host: dict[int, torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        return host.get(id(x), x)
    if type(x) is list or type(x) is tuple:
        return type(x)([_swap(i, host) for i in x])
    return x


def _wrap_fallback(
    out: Any, u: Unwrapped, core: int, back: dict[int, torch.Tensor], tl: DeviceTimeline, op: str
) -> Any:
    if isinstance(out, torch.Tensor):
        dev = back.get(id(out))
        if dev is not None:  # the op returned a mutated input: hand back its device tensor
            return u.alias[id(dev)]
        nbytes = out.numel() * out.element_size()
        tl.copy(core, F.H2D, nbytes, launch_ns=time.time_ns(), op=op, call_end_ns=time.time_ns())
        return new_device_tensor(out, core, True)
    if type(out) is list or type(out) is tuple:
        return type(out)([_wrap_fallback(o, u, core, back, tl, op) for o in out])
    return out
