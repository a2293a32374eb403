"""Timing mode (``enable(numerics=False)``): device ops produce outputs of the right shape, dtype
and strides without computing them.

    plan = output_plan(func, u)           # None: this op must run for real (see below)
    out, written = materialise(plan, u)   # zero-filled outputs; aliased inputs handed back

The shapes come from running the op once on meta tensors (PyTorch's own shape functions); the
result is cached per (op, argument shapes/strides/dtypes, non-tensor arguments), so a warm step
costs a dict lookup and one allocation per output. Outputs are zero-filled and deterministic.
Their host cost does not grow with their size: outputs of ``MMAP_MIN_BYTES`` or more are
anonymous memory mappings (the kernel hands out zero pages on first touch, and nothing touches
them unless the program copies them to the host); smaller ones are ``torch.zeros``.

An op runs for real instead (its plan is ``None``, also cached) when it has no meta kernel, when
its output shape depends on the data, or when it returns host values (``torch.equal``): that
keeps programs running, at the op's real host cost.
"""

from __future__ import annotations

import mmap
from typing import Any

import torch

MMAP_MIN_BYTES = 1 << 20
_META = torch.device("meta")
_REAL = "real"  # cached marker: run this op for real
_PLANS: dict[Any, Any] = {}
_MAX_PLANS = 100_000


class _Uncacheable(Exception):
    pass


class Plan:
    """The outputs of one op: a tree of ("new", shape, stride, dtype) / ("alias", input index,
    shape, stride) leaves, None where the op returns None (in-place foreach ops return nothing)."""

    __slots__ = ("tree",)

    def __init__(self, tree: Any) -> None:
        self.tree = tree


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


def _to_meta(x: Any, memo: dict[int, torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        m = memo.get(id(x))
        if m is None:
            m = memo[id(x)] = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=_META)
        return m
    t = type(x)
    if t is list or t is tuple:
        return t([_to_meta(i, memo) for i in x])
    if t is torch.device:
        return _META if x.type == "cpu" else x
    if t is torch.Generator:
        return None
    return x


def _plan_of(out: Any, index: dict[int, int]) -> Any:
    """Output tree -> plan tree; raises ``_Uncacheable`` when the op returns host values."""
    if out is None:
        return None
    if isinstance(out, torch.Tensor):
        i = index.get(id(out))
        if i is not None:  # an input written in place (or out=): it may have been resized
            return ("alias", i, tuple(out.shape), tuple(out.stride()))
        return ("new", tuple(out.shape), tuple(out.stride()), out.dtype)
    t = type(out)
    if t is list or t is tuple:
        return t([_plan_of(o, index) for o in out])
    raise _Uncacheable  # ints, floats, bools: a host value the op computed


def output_plan(func: Any, args: tuple, kwargs: dict, inputs: list[torch.Tensor]) -> Plan | None:
    """The cached plan of ``func`` on these (unwrapped, CPU) arguments; None: run it for real."""
    try:
        key = (func, _sig(args), _sig(tuple(kwargs.items())) if kwargs else ())
        plan = _PLANS.get(key)
    except _Uncacheable:
        key, plan = None, None
    if plan is not None:
        return None if plan is _REAL else plan
    plan = _make_plan(func, args, kwargs, inputs)
    if key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = _REAL if plan is None else plan
    return plan


def _make_plan(func: Any, args: tuple, kwargs: dict, inputs: list[torch.Tensor]) -> Any:
    memo: dict[int, torch.Tensor] = {}
    margs = _to_meta(args, memo)
    mkwargs = {k: _to_meta(v, memo) for k, v in kwargs.items()}
    index = {id(memo[id(t)]): i for i, t in enumerate(inputs) if id(t) in memo}
    try:
        out = func(*margs, **mkwargs)
        return Plan(_plan_of(out, index))
    except Exception:  # no meta kernel, data-dependent shape, host value: run it for real
        return None


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
    return base.as_strided(shape, stride)


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


def materialise(plan: Plan, inputs: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    """The op's outputs from its plan: new zero tensors, or the inputs it wrote (resized as the
    op would have); ``written`` lists every output tensor (for the op's cost)."""
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
                out.resize_(p[2])
        written.append(out)
        return out
    return t([_build(i, inputs, written) for i in p])
