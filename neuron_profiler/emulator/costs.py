"""Flops and HBM bytes of one aten op the emulated device runs, for the roofline model
(``timing.RooflineModel``)::

    cost = op_cost("aten::mm", inputs=[a, b], outputs=[c], args=(a, b))
    cost.flops, cost.bytes_moved, cost.matrix, cost.dtype

The formulas are the cost model's (``costmodel.ops``, shared with the projection); this module
only reads what they need from the op's (CPU) tensors: shapes, byte sizes and the first floating
dtype. Bytes are every tensor read plus every tensor written.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from neuron_profiler.costmodel.ops import (
    LINALG_OPS,
    MATRIX_OPS,
    OpCost,
    linalg_flops,
    matrix_flops,
    vector_flops,
)

__all__ = ["OpCost", "op_cost"]


def _matrix_flops(name: str, args: tuple, outputs: Sequence[torch.Tensor]) -> int | None:
    """Flops of matrix-engine ops, from the op's own arguments; None for vector ops."""
    dims = [a.shape if isinstance(a, torch.Tensor) else () for a in args]
    transposed, mask = False, (True, True, True)
    if name == "aten::convolution":
        transposed = bool(args[6])
    elif name == "aten::convolution_backward":
        transposed = bool(args[7])
        mask = args[10] if len(args) > 10 else mask
    out_numel = outputs[0].numel()  # (no output: IndexError, priced as vector work)
    return matrix_flops(name, dims, out_numel, transposed=transposed, output_mask=mask)


def op_cost(
    name: str, *, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], args: tuple
) -> OpCost:
    """Cost of one op; ``inputs``/``outputs`` are the (CPU) tensors it reads and writes."""
    try:
        return _dense_cost(name, inputs, outputs, args)
    except RuntimeError:  # a sparse tensor has no nbytes
        if not any(t.layout in _SPARSE for t in (*inputs, *outputs)):
            raise
    # sparse: the bytes of its indices and values; priced as vector work over them (no sparse
    # kernel model: a dense matmul formula would count the zeros)
    return _dense_cost("sparse", _parts(inputs), _parts(outputs), ())


def _parts(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors, each sparse one replaced by its index and value tensors (its memory)."""
    out: list[torch.Tensor] = []
    for t in tensors:
        layout = t.layout
        if layout is torch.sparse_coo:
            out += (t._indices(), t._values())
        elif layout in (torch.sparse_csr, torch.sparse_bsr):
            out += (t.crow_indices(), t.col_indices(), t.values())
        elif layout in (torch.sparse_csc, torch.sparse_bsc):
            out += (t.ccol_indices(), t.row_indices(), t.values())
        else:
            out.append(t)
    return out


def _dense_cost(
    name: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], args: tuple
) -> OpCost:
    nbytes = elems = out_elems = 0
    dtype = None
    floating = _FLOATING
    for t in inputs:
        b = t.nbytes
        nbytes += b
        d = t.dtype
        n = b // d.itemsize
        if n > elems:
            elems = n
        if dtype is None and d in floating:
            dtype = d
    for t in outputs:
        b = t.nbytes
        nbytes += b
        d = t.dtype
        out_elems += b // d.itemsize
        if dtype is None and d in floating:
            dtype = d
    if dtype is None:
        dtype = (inputs or outputs)[0].dtype if (inputs or outputs) else torch.float32
    dtype_name = _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")
    if name in MATRIX_OPS or name.startswith("aten::_scaled_dot_product"):
        try:
            flops = _matrix_flops(name, args, outputs)
        except (IndexError, AttributeError, TypeError):  # unexpected overload: count as vector
            flops = None
        if flops is not None:
            return OpCost(flops=int(flops), bytes_moved=nbytes, matrix=True, dtype=dtype_name)
    if name in LINALG_OPS and inputs:
        flops = linalg_flops(name, inputs[0].shape)
        if flops is not None:
            return OpCost(flops=flops, bytes_moved=nbytes, matrix=True, dtype=dtype_name)
    if name.startswith("aten::_foreach_"):
        elems = out_elems or elems
    else:
        elems = max(elems, out_elems)
    return OpCost(
        flops=vector_flops(name, elems),
        bytes_moved=nbytes,
        matrix=False,
        dtype=dtype_name,
    )


_SPARSE = frozenset(
    (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
)
_DTYPE_NAMES = {
    d: str(d).removeprefix("torch.")
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
    )
}
_FLOATING = frozenset(
    {
        torch.float32,
        torch.bfloat16,
        torch.float16,
        torch.float64,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    }
)
