"""Flops and HBM bytes of one aten op, for the roofline model (``timing.RooflineModel``).

    cost = op_cost("aten::mm", inputs=[a, b], outputs=[c], args=(a, b))
    cost.flops, cost.bytes_moved, cost.matrix, cost.dtype

Matrix ops (mm, bmm, addmm, baddbmm, convolution, attention) count 2 flops per multiply-add and
run on the Tensor engine; the dense factorisations of the default CPU-fallback set (cholesky, LU
det and inverse, QR, eigh, SVD) count LAPACK's operation counts and are matrix work too;
everything else is elementwise/reduction work on the Vector engine, counted per element with a
small per-op factor (one flop per element of the largest tensor by default, so data-dependent
ops such as nonzero, unique or bincount come out bytes-bound). Bytes are every tensor read plus
every tensor written (no cache model: eager ops stream through HBM).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

# Flops per output-or-input element for vector-engine ops (default 1). Transcendentals and
# normalisations cost more than an add; the figures are this project's estimates.
_VECTOR_FACTOR = {
    "aten::exp": 4,
    "aten::log": 4,
    "aten::tanh": 6,
    "aten::sigmoid": 5,
    "aten::gelu": 8,
    "aten::gelu_backward": 12,
    "aten::silu": 6,
    "aten::erf": 6,
    "aten::pow": 4,
    "aten::sqrt": 2,
    "aten::rsqrt": 2,
    "aten::div": 2,
    "aten::_softmax": 5,
    "aten::_softmax_backward_data": 4,
    "aten::_log_softmax": 5,
    "aten::_log_softmax_backward_data": 4,
    "aten::native_layer_norm": 8,
    "aten::native_layer_norm_backward": 12,
    "aten::native_batch_norm": 8,
    "aten::_native_batch_norm_legit": 8,
    "aten::_native_batch_norm_legit_no_training": 4,
    "aten::native_batch_norm_backward": 12,
    "aten::_foreach_addcdiv_": 3,
    "aten::_foreach_addcmul_": 2,
    "aten::_foreach_sqrt": 2,
    "aten::_foreach_lerp_": 3,
    "aten::_foreach_div_": 2,
}


class OpCost(NamedTuple):
    """Immutable like a frozen dataclass, but built once per op on the hot path: a tuple."""

    flops: int
    bytes_moved: int
    matrix: bool
    dtype: str


def _mm_flops(a: torch.Tensor, b: torch.Tensor) -> int:
    batch = math.prod(a.shape[:-2]) if a.dim() > 2 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def _conv_flops(
    inp: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, transposed: bool
) -> int:
    kernel = math.prod(weight.shape[2:])
    if transposed:  # weight (Cin, Cout/groups, k...): every input element scatters into k*Cout/g
        return 2 * inp.numel() * weight.shape[1] * kernel
    return 2 * out.numel() * weight.shape[1] * kernel  # weight (Cout, Cin/groups, k...)


def _matrix_flops(name: str, args: tuple, outputs: Sequence[torch.Tensor]) -> int | None:
    """Flops of Tensor-engine ops, from the op's own arguments; None for vector ops."""
    if name in ("aten::mm", "aten::bmm"):
        return _mm_flops(args[0], args[1])
    if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation"):
        return _mm_flops(args[1], args[2]) + outputs[0].numel()
    if name == "aten::addbmm":
        return _mm_flops(args[1], args[2]) + outputs[0].numel()
    if name == "aten::convolution":
        return _conv_flops(args[0], args[1], outputs[0], bool(args[6]))
    if name == "aten::convolution_backward":
        grad_out, inp, weight = args[0], args[1], args[2]
        fwd = _conv_flops(inp, weight, grad_out, bool(args[7]))
        mask = args[10] if len(args) > 10 else (True, True, True)
        return fwd * (int(bool(mask[0])) + int(bool(mask[1]))) + grad_out.numel()
    if name.startswith("aten::_scaled_dot_product") and len(args) >= 3:
        q, k = args[0], args[1]
        fwd = 4 * math.prod(q.shape[:-1]) * k.shape[-2] * q.shape[-1]
        return fwd * 5 // 2 if name.endswith("_backward") else fwd
    return None


def _linalg_flops(name: str, inputs: Sequence[torch.Tensor]) -> int | None:
    """Leading-term operation counts of the dense factorisations (real arithmetic, Golub & Van
    Loan, Matrix Computations, 4th ed.), per matrix of the first input, times its batch."""
    if not inputs or inputs[0].dim() < 2:
        return None
    a = inputs[0]
    m, n = a.shape[-2], a.shape[-1]
    k, big = min(m, n), max(m, n)
    per_matrix = {
        "aten::linalg_cholesky_ex": n**3 / 3,
        "aten::_linalg_det": 2 * n**3 / 3,  # LU
        "aten::linalg_inv_ex": 2 * n**3,  # LU, then the inverse from its factors
        "aten::linalg_qr": 4 * big * k**2 - 4 * k**3 / 3,  # Householder R, then Q formed
        "aten::_linalg_eigh": 9 * n**3,  # tridiagonal reduction + QR iteration, vectors
        "aten::linalg_eigh": 9 * n**3,
        "aten::_linalg_svd": 6 * big * k**2 + 11 * k**3,  # R-SVD, thin U and V
    }.get(name)
    return None if per_matrix is None else int(per_matrix * math.prod(a.shape[:-2]))


_LINALG_OPS = frozenset(
    {
        "aten::linalg_cholesky_ex",
        "aten::_linalg_det",
        "aten::linalg_inv_ex",
        "aten::linalg_qr",
        "aten::_linalg_eigh",
        "aten::linalg_eigh",
        "aten::_linalg_svd",
    }
)
_MATRIX_OPS = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::_addmm_activation",
        "aten::addbmm",
        "aten::convolution",
        "aten::convolution_backward",
    }
)


def op_cost(
    name: str, *, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], args: tuple
) -> OpCost:
    """Cost of one op; ``inputs``/``outputs`` are the (CPU) tensors it reads and writes."""
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
    if name in _MATRIX_OPS or name.startswith("aten::_scaled_dot_product"):
        try:
            flops = _matrix_flops(name, args, outputs)
        except (IndexError, AttributeError, TypeError):  # unexpected overload: count as vector
            flops = None
        if flops is not None:
            return OpCost(flops=int(flops), bytes_moved=nbytes, matrix=True, dtype=dtype_name)
    if name in _LINALG_OPS:
        flops = _linalg_flops(name, inputs)
        if flops is not None:
            return OpCost(flops=flops, bytes_moved=nbytes, matrix=True, dtype=dtype_name)
    if name.startswith("aten::_foreach_"):
        elems = out_elems or elems
    else:
        elems = max(elems, out_elems)
    return OpCost(
        flops=_VECTOR_FACTOR.get(name, 1) * elems,
        bytes_moved=nbytes,
        matrix=False,
        dtype=dtype_name,
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
