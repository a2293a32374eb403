"""Timing mode (``enable(numerics=False)``): large device ops produce outputs of the right shape,
dtype and strides without computing them; small ones are computed for real (hybrid).

    plan = timing_plan(func, args, kwargs, inputs)   # None: no plan, this op must run for real
    plan.real                                        # small: compute it (``computes_for_real``)
    out, written = materialise(plan, inputs)         # else zero-filled outputs, inputs handed back
    output_plan(func, args, kwargs, inputs)          # the plan, or None when it runs for real

The shapes come from running the op once on fake host tensors (PyTorch's own shape functions,
``FakeTensorMode``: data-less tensors that keep the host device, so strides and memory formats
are the ones the CPU kernel gives, as numerics mode's; ~0.15 ms per new plan); the result is
cached per (op, argument shapes/strides/dtypes, non-tensor arguments), so a warm step
costs a dict lookup and one allocation per output. Outputs are zero-filled and deterministic.
Their host cost does not grow with their size: outputs of ``MMAP_MIN_BYTES`` or more are
anonymous memory mappings (the kernel hands out zero pages on first touch, and nothing touches
them unless the program copies them to the host); smaller ones are ``torch.zeros``.

An op runs for real instead (its plan is ``None``, also cached) when it has no meta kernel, when
its output shape depends on the data, or when it returns host values (``torch.equal``): that
keeps programs running, at the op's real host cost.

An op with a plan is also computed for real when it is small (``computes_for_real``, decided
once per plan): scalars, index and mask arithmetic, comparisons and reductions of small tensors,
small factories. Programs read such values (stopping criteria, positions, masks, counters), and
their host cost is bounded by the thresholds below. Large floating-point work stays modelled.
The rule sees shapes and dtypes only, so the decision is cached with the plan: a warm op costs
the same dict lookup whichever way it goes.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from typing import Any

import torch

from neuron_profiler.emulator.costs import op_cost
from neuron_profiler.trace import vocabulary as V

MMAP_MIN_BYTES = 1 << 20

# -- what timing mode computes for real (docs/emulator.md, "Two modes") ---------------------------
# Floating-point elements an op may read and write in all (every input and output tensor, summed)
# and still be computed: 16,384 fp32 elements are 64 KiB, a few us of host time for pointwise and
# reduction ops (bench/bench_timing_hybrid.py). Holds a (1, 8192) softmax, a (64, 64) mask.
REAL_MAX_ELEMENTS = 1 << 14
# Ops whose tensors are all integer or bool (token ids, positions, indices, masks, counters): what
# control flow and indexing read. 131,072 elements (1 MiB of int64; a (16, 4096) attention mask
# and its cumsum); cheap per element (no transcendentals), tens of us at the limit.
REAL_MAX_INDEX_ELEMENTS = 1 << 17
# The cost model's flops (costs.op_cost: 2 per multiply-add for matrix ops): keeps matrix work
# small where few elements hide many flops; 262,144 flops is a 64x64x32 matmul, ~5 us on the host.
REAL_MAX_FLOPS = 1 << 18
# Ops whose host kernels sort, search or sample cost 10-25 ns per element where a pointwise op
# costs 0.2-1 (a 4096-float sort ~50 us, multinomial ~100 us): their elements count this many
# times against the limits above.
HOST_HEAVY_FACTOR = 8
HOST_HEAVY_OPS = frozenset(
    {
        "aten::sort",
        "aten::argsort",
        "aten::msort",
        "aten::multinomial",
        "aten::isin",
        "aten::searchsorted",
        "aten::bucketize",
        "aten::kthvalue",
        "aten::median",
        "aten::nanmedian",
        "aten::mode",
        "aten::randperm",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
    }
)
# Ops whose new outputs are zeros by definition: modelled, they hold their real values.
ZEROS_OPS = frozenset({"aten::zeros", "aten::zeros_like", "aten::new_zeros"})
# Allocations are never computed: their real output is uninitialised memory, timing mode's is
# zeros (and stays so; dispatch.py treats them as allocations, no kernel). ``_efficientzerotensor``
# (the zero tangents of forward-mode autograd) is zeros by definition: on the device a buffer of
# zeros (host_ops.efficient_zero_tensor), no kernel, as CUDA launches none for it.
ALLOC_OPS = V.ALLOCATION_OPS | {"aten::resize_as_", "aten::_efficientzerotensor"}
_META = torch.device("meta")
_CPU = torch.device("cpu")
_FAKE: Any = None  # _fake_mode()
_FakeTensor: Any = None
_REAL = "real"  # cached marker: run this op for real
_PLANS: dict[Any, Any] = {}
_MAX_PLANS = 100_000


class _Uncacheable(Exception):
    pass


class Plan:
    """The outputs of one op: a tree of ("new", shape, stride, dtype) / ("alias", input index,
    shape, stride) leaves, None where the op returns None (in-place foreach ops return nothing);
    ``real``: small enough to compute for real (``computes_for_real``)."""

    __slots__ = ("tree", "real")

    def __init__(self, tree: Any, real: bool = False) -> None:
        self.tree = tree
        self.real = real


def computes_for_real(
    op: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], args: tuple = ()
) -> bool:
    """Timing mode's one rule: is this op (``op`` its overload packet, ``inputs`` every tensor
    it reads, ``outputs`` every tensor it writes, CPU or meta) computed for real on the host?

    Yes when its elements (all tensors, summed; x ``HOST_HEAVY_FACTOR`` for sorting/sampling ops)
    are within ``REAL_MAX_INDEX_ELEMENTS`` if every tensor is integer or bool, else within
    ``REAL_MAX_ELEMENTS``, and the cost model's flops within ``REAL_MAX_FLOPS``. Allocations
    never (zeros are their defined value). The device time is the cost model's either way."""
    if op in ALLOC_OPS:
        return False
    elements, integral = 0, True
    for t in (*inputs, *outputs):
        elements += t.numel()
        if integral and (t.dtype.is_floating_point or t.dtype.is_complex):
            integral = False
    if op in HOST_HEAVY_OPS:
        elements *= HOST_HEAVY_FACTOR
    if elements > (REAL_MAX_INDEX_ELEMENTS if integral else REAL_MAX_ELEMENTS):
        return False
    try:
        flops = op_cost(op, inputs=inputs, outputs=outputs, args=args).flops
    except Exception:  # an overload the cost model does not expect: keep it modelled
        return False
    return flops <= REAL_MAX_FLOPS


def _sig(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype, x.storage_offset())
    t = type(x)
    if t is list or t is tuple:
        return tuple([_sig(i) for i in x])
    if t is torch.Generator:  # random ops: the shape does not depend on the generator's state
        return t
    try:
        hash(x)
    except TypeError:
        raise _Uncacheable from None
    return (t, x)


def _fake_mode() -> Any:
    """The fake-tensor mode plans run in (made once): tensors without data that keep their
    device, so each shape function picks the strides and memory format its CPU kernel gives (a
    plain meta tensor has no device: a convolution's meta kernel then leaves a channels_last
    output contiguous, fft and eig meta kernels take cuFFT's / MAGMA's strides). Ops with no fake
    or meta implementation raise instead of running on zeros: they are computed for real."""
    global _FAKE, _FakeTensor
    if _FAKE is None:
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        _FAKE, _FakeTensor = FakeTensorMode(allow_fallback_kernels=False), FakeTensor
    return _FAKE


def _to_fake(x: Any, memo: dict[int, torch.Tensor]) -> Any:
    """Host tensors -> data-less host tensors of the same layout (fake tensors of ``_FAKE``,
    built directly: a factory call under the mode costs ~10x more)."""
    if isinstance(x, torch.Tensor):
        m = memo.get(id(x))
        if m is None:
            meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=_META)
            m = memo[id(x)] = _FakeTensor(_FAKE, meta, _CPU)
        return m
    t = type(x)
    if t is list or t is tuple:
        return t([_to_fake(i, memo) for i in x])
    if t is torch.Generator:
        return None
    return x


def _leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if type(out) is list or type(out) is tuple:
        return [t for o in out for t in _leaves(o)]
    return []


def _plan_of(out: Any, index: dict[int, int]) -> Any:
    """Output tree -> plan tree; raises ``_Uncacheable`` when the op returns host values."""
    if out is None:
        return None
    if isinstance(out, torch.Tensor):
        if out.layout is not torch.strided:  # sparse: its indices are data, computed for real
            raise _Uncacheable
        i = index.get(id(out))
        if i is not None:  # an input written in place (or out=): it may have been resized
            return ("alias", i, tuple(out.shape), tuple(out.stride()))
        return ("new", tuple(out.shape), tuple(out.stride()), out.dtype)
    t = type(out)
    if t is list or t is tuple:
        return t([_plan_of(o, index) for o in out])
    raise _Uncacheable  # ints, floats, bools: a host value the op computed


def output_plan(func: Any, args: tuple, kwargs: dict, inputs: list[torch.Tensor]) -> Plan | None:
    """The plan to materialise ``func``'s outputs on these (unwrapped, CPU) arguments; None: run
    it for real (no plan, or small enough to compute: ``computes_for_real``)."""
    plan = timing_plan(func, args, kwargs, inputs)
    return None if plan is None or plan.real else plan


def _scalar_blind_sig(x: Any) -> Any:
    """``_sig`` with Python scalars by type only: for ops whose output shapes never depend on
    their scalars (``_foreach_*``: AdamW's bias corrections change every step, and a key with
    their values would miss the cache and rerun the meta kernels of every parameter)."""
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype, x.storage_offset())
    t = type(x)
    if t is list or t is tuple:
        return tuple([_scalar_blind_sig(i) for i in x])
    if t is float or t is int or t is bool or t is complex:
        return t
    return _sig(x)


_FOREACH: dict[Any, bool] = {}  # overload -> is a _foreach_ op (scalars never decide its shapes)


def timing_plan(
    func: Any,
    args: tuple,
    kwargs: dict,
    inputs: list[torch.Tensor],
    run: Callable[..., Any] | None = None,
) -> Plan | None:
    """The cached plan of ``func`` on these (unwrapped, CPU) arguments, its ``real`` decided;
    None: no plan (no meta kernel, data-dependent shape, host value), run it for real. ``run``:
    what computes ``func`` on host tensors where that is not ``func`` itself (host_ops.py), also
    run on meta tensors for the plan."""
    foreach = _FOREACH.get(func)
    if foreach is None:
        foreach = _FOREACH[func] = func._overloadpacket.__name__.startswith("_foreach_")
    sig = _scalar_blind_sig if foreach else _sig
    try:
        key = (func, sig(args), sig(tuple(kwargs.items())) if kwargs else ())
        plan = _PLANS.get(key)
    except (_Uncacheable, RuntimeError):  # RuntimeError: a nested tensor has no sizes
        key, plan = None, None
    if plan is not None:
        return None if plan is _REAL else plan
    plan = _make_plan(func, args, kwargs, inputs, run or func)
    if key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = _REAL if plan is None else plan
    return plan


def _make_plan(
    func: Any, args: tuple, kwargs: dict, inputs: list[torch.Tensor], run: Callable[..., Any]
) -> Any:
    memo: dict[int, torch.Tensor] = {}
    try:
        mode = _fake_mode()
        margs = _to_fake(args, memo)  # outside the mode: it would dispatch the meta factory
        mkwargs = {k: _to_fake(v, memo) for k, v in kwargs.items()}
        with mode:
            out = run(*margs, **mkwargs)
        index = {id(memo[id(t)]): i for i, t in enumerate(inputs) if id(t) in memo}
        tree = _plan_of(out, index)
    except Exception:  # no meta kernel, data-dependent shape, host value, a nested tensor:
        return None  # run it for real
    name = func._overloadpacket._qualified_op_name
    return Plan(tree, computes_for_real(name, inputs, _leaves(out), margs))


def zeros(shape: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A zero-filled tensor of this layout whose host cost does not grow with its size."""
    n = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True))
    itemsize = (
        torch.empty((), dtype=dtype).element_size() if dtype not in _ITEMSIZE else _ITEMSIZE[dtype]
    )
    nbytes = n * itemsize
    if nbytes >= MMAP_MIN_BYTES:
        base = torch.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype, count=n)
    else:
        base = torch.zeros(n, dtype=dtype)
    if len(shape) == 1 and stride == (1,):
        return base
    # on the storage, not a view of ``base``: a view would hold ``base`` (its ``_base``), one
    # more holder of the storage, which reads as an alias keeping the buffer alive (memory.py)
    return torch.empty(0, dtype=dtype).set_(base.untyped_storage(), 0, shape, stride)


def resizable_storage(t: torch.Tensor) -> torch.UntypedStorage:
    """``t``'s storage, made resizable in place if it is one of ``zeros``' memory maps (PyTorch
    cannot resize a buffer it did not allocate): its bytes move into ordinary host memory, once,
    and every tensor on the storage keeps seeing them. FSDP frees and regrows storages."""
    storage = t.untyped_storage()
    if not storage.resizable():
        fresh = torch.UntypedStorage(storage.nbytes())
        fresh.copy_(storage)
        storage._swap_data_ptr_(fresh)  # swaps the bytes and the allocator, not the object
    return storage


_ITEMSIZE = {
    d: torch.empty((), dtype=d).element_size()
    for d in (
        torch.float32,
        torch.bfloat16,
        torch.float16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
    )
}


def resize_zeroed(t: torch.Tensor, shape: tuple, stride: tuple) -> None:
    """``t.resize_(shape)`` as a modelled op does it: when the storage must grow, ``t`` gets a new
    zero-filled one (``zeros``: host cost independent of size) instead of the allocator's
    uninitialised bytes; within its storage, the bytes it already holds (zeros or values)."""
    need = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True))
    itemsize = t.element_size()
    if (t.storage_offset() + need) * itemsize <= t.untyped_storage().nbytes():
        t.resize_(shape)
        return
    fresh = zeros(shape, stride, t.dtype)
    t.set_(fresh.untyped_storage(), 0, shape, stride)


_materialised = 0


def materialised() -> int:
    """How many ops' outputs ``materialise`` has modelled so far (a caller that hands an op to
    code which may or may not model it, e.g. copies.py, compares before and after)."""
    return _materialised


def materialise(plan: Plan, inputs: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    """The op's outputs from its plan: new zero tensors, or the inputs it wrote (resized as the
    op would have, grown storage zero-filled); ``written`` lists every output tensor (for the
    op's cost)."""
    global _materialised
    _materialised += 1
    written: list[torch.Tensor] = []
    return _build(plan.tree, inputs, written), written


def _build(p: Any, inputs: list[torch.Tensor], written: list[torch.Tensor]) -> Any:
    """One plan node's outputs. A module function, not a closure over ``inputs``: a nested
    function that calls itself is a reference cycle (function -> its cell -> function), which
    would keep every input's device memory alive until the garbage collector ran, and the
    collector would then free large buffers inside whatever op triggered it (34-48 ms in
    ``aten::t`` for a 12288x12288 float32 copy)."""
    if p is None:
        return None
    t = type(p)
    if t is tuple and p and type(p[0]) is str:
        if p[0] == "new":
            out = zeros(p[1], p[2], p[3])
        else:
            out = inputs[p[1]]
            if tuple(out.shape) != p[2]:
                resize_zeroed(out, p[2], p[3])
        written.append(out)
        return out
    return t([_build(i, inputs, written) for i in p])
