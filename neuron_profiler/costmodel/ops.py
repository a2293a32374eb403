"""Flops and HBM bytes of one aten op from its name, argument shapes and dtypes (torch-free).

    op_cost("aten::addmm", dims=[[1000], [32, 2048], [2048, 1000]], types=["float"] * 3)
    matrix_flops("aten::mm", [(m, k), (k, n)], out_numel=m * n)

Two callers: the emulator times the ops it runs (``emulator.costs`` hands it the tensors'
shapes and sizes), the projection prices the ops of a recorded trace from their ``Input Dims`` /
``Input type`` args (``op_cost``: outputs are not recorded, so their size is inferred from the
op). Matrix ops (mm, bmm, addmm, linear, matmul, convolution and its backward, attention) count
2 flops per multiply-add and run on the matrix engine; the dense factorisations count LAPACK's
operation counts; everything else is vector work, a small per-element factor times the largest
tensor (one flop per element by default). Bytes are every tensor read plus every tensor written
(no cache model: eager ops stream through HBM).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from neuron_profiler.costmodel.chips import TF32

Shape = Sequence[int]

# Flops per output-or-input element for vector-engine ops (default 1). Transcendentals and
# normalisations cost more than an add; the figures are this project's estimates.
VECTOR_FACTOR = {
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

LINALG_OPS = frozenset(
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
MATRIX_OPS = frozenset(
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

# Bytes per element by dtype name (torch's names without "torch.").
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    TF32: 4,
    "complex64": 8,
    "complex128": 16,
}
FLOATING = frozenset({"float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"})
# The profiler's "Input type" spelling (C++ scalar type names) -> dtype name.
TRACE_TYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    # NCCL's collective args spell the scalar type's own name
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Byte": "uint8",
    "Char": "int8",
    "Bool": "bool",
}

# Device-specific lowerings -> the aten op whose formula prices them (cuDNN / MIOpen kernels
# and the wrappers above them record the same argument shapes).
_ALIASES = {
    "aten::cudnn_convolution": "aten::convolution",
    "aten::miopen_convolution": "aten::convolution",
    "aten::_convolution": "aten::convolution",
    "aten::conv1d": "aten::convolution",
    "aten::conv2d": "aten::convolution",
    "aten::conv3d": "aten::convolution",
    "aten::cudnn_convolution_transpose": "aten::convolution",
    "aten::cudnn_batch_norm": "aten::native_batch_norm",
    "aten::miopen_batch_norm": "aten::native_batch_norm",
    "aten::cudnn_batch_norm_backward": "aten::native_batch_norm_backward",
    "aten::miopen_batch_norm_backward": "aten::native_batch_norm_backward",
    "aten::layer_norm": "aten::native_layer_norm",
    "aten::softmax": "aten::_softmax",
    "aten::log_softmax": "aten::_log_softmax",
}
# Ops whose one convolution-sized product is one input's gradient (the cuDNN split backward).
_CONV_GRAD_ONE = frozenset(
    {"aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight"}
)
# A weight gradient's kernel size is not among its recorded arguments: 3 x 3, the commonest
# kernel of the convolutional networks in the shared traces (ASSUMPTION).
UNKNOWN_KERNEL_ELEMS = 9
_ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
    }
)
_COPY_OPS = frozenset(
    {"aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous"}
)


class OpCost(NamedTuple):
    """Immutable like a frozen dataclass, but built once per op on the hot path: a tuple."""

    flops: int
    bytes_moved: int
    matrix: bool
    dtype: str


def numel(shape: Shape) -> int:
    return math.prod(shape)


def mm_batch(a: Shape, b: Shape) -> int:
    """Batch entries of (..., m, k) @ (..., k, n): the product of the two batch shapes
    broadcast together (torch.matmul's rule; ValueError where they do not broadcast)."""
    x, y = tuple(a[:-2]), tuple(b[:-2])
    width = max(len(x), len(y))
    x, y = (1,) * (width - len(x)) + x, (1,) * (width - len(y)) + y
    if any(i != j and 1 not in (i, j) for i, j in zip(x, y, strict=True)):
        raise ValueError(f"batch shapes {a[:-2]} and {b[:-2]} do not broadcast")
    return math.prod(max(i, j) if 1 in (i, j) else i for i, j in zip(x, y, strict=True))


def mm_flops(a: Shape, b: Shape) -> int:
    """(..., m, k) @ (..., k, n): 2 m k n per batch entry (``mm_batch``)."""
    return 2 * mm_batch(a, b) * a[-2] * a[-1] * b[-1]


def is_attention(name: str) -> bool:
    """Scaled dot-product attention, fused or a backend's lowering of it."""
    return name.startswith("aten::_scaled_dot_product") or name in _ATTENTION_OPS


def attention_flops(name: str, q: Shape, k: Shape) -> int:
    """Q K^T and P V, 2 L_q L_k d each per batch entry and head; a backward pass 2.5 times
    the forward (its five products against the forward's two)."""
    fwd = 4 * math.prod(q[:-1]) * k[-2] * q[-1]
    return fwd * 5 // 2 if name.endswith("_backward") else fwd


def conv_flops(inp: Shape, weight: Shape, out_numel: int, transposed: bool) -> int:
    kernel = math.prod(weight[2:])
    if transposed:  # weight (Cin, Cout/groups, k...): every input element scatters into k*Cout/g
        return 2 * numel(inp) * weight[1] * kernel
    return 2 * out_numel * weight[1] * kernel  # weight (Cout, Cin/groups, k...)


def matrix_flops(
    name: str,
    dims: Sequence[Shape],
    out_numel: int,
    *,
    transposed: bool = False,
    output_mask: Sequence[bool] = (True, True, True),
) -> int | None:
    """Flops of matrix-engine ops from the shapes of the op's arguments in schema order (``()``
    for a non-tensor argument); ``out_numel``: elements of the first output. None for vector
    ops."""
    if name in ("aten::mm", "aten::bmm"):
        return mm_flops(dims[0], dims[1])
    if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation", "aten::addbmm"):
        return mm_flops(dims[1], dims[2]) + out_numel
    if name == "aten::convolution":
        return conv_flops(dims[0], dims[1], out_numel, transposed)
    if name == "aten::convolution_backward":
        grad_out, inp, weight = dims[0], dims[1], dims[2]
        fwd = conv_flops(inp, weight, numel(grad_out), transposed)
        return fwd * (int(bool(output_mask[0])) + int(bool(output_mask[1]))) + numel(grad_out)
    if is_attention(name) and len(dims) >= 3 and dims[0] and dims[1]:
        return attention_flops(name, dims[0], dims[1])
    return None


def linalg_flops(name: str, a: Shape) -> int | None:
    """Leading-term operation counts of the dense factorisations (real arithmetic, Golub & Van
    Loan, Matrix Computations, 4th ed.), per matrix of the first input, times its batch."""
    if len(a) < 2:
        return None
    m, n = a[-2], a[-1]
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
    return None if per_matrix is None else int(per_matrix * math.prod(a[:-2]))


def vector_flops(name: str, elems: int) -> int:
    return VECTOR_FACTOR.get(name, 1) * elems


def math_dtype(name: str, dtype: str) -> str:
    """The dtype a matrix op computes in: FP32 convolutions run on TF32 tensor cores where the
    chip has them (PyTorch's default ``torch.backends.cudnn.allow_tf32 = True``; its matmul
    default, ``allow_tf32 = False`` since 1.12, keeps FP32 products at the FP32 rate)."""
    if dtype == "float32" and _is_convolution(name):
        return TF32
    return dtype


def _is_convolution(name: str) -> bool:
    return canonical(name) == "aten::convolution" or "convolution_backward" in name


def canonical(name: str) -> str:
    """The op whose formula prices ``name`` (device lowerings and wrappers mapped)."""
    return _ALIASES.get(name, name)


def op_cost(name: str, dims: Sequence[Shape], types: Sequence[str]) -> OpCost:
    """Cost of one recorded op from its ``Input Dims`` and ``Input type`` args. Outputs are not
    recorded: their size is inferred (a matrix product's m x n, a convolution's output at the
    input's spatial size, stride 1 being the ASSUMPTION; the largest input otherwise, none for a
    reduction to a scalar)."""
    op = canonical(name)
    if op.startswith("aten::_foreach_") and any(_is_tensor_list(d) for d in dims):
        return _foreach_cost(op, dims)
    tensors = [(tuple(d), _dtype(t)) for d, t in zip(dims, types, strict=False) if _is_tensor(d)]
    if not tensors:
        return OpCost(0, 0, False, "float32")
    dtype = next((t for _, t in tensors if t in FLOATING), tensors[0][1])
    in_bytes = sum(numel(d) * DTYPE_BYTES.get(t, 4) for d, t in tensors)
    width = DTYPE_BYTES.get(dtype, 4)
    largest = max(numel(d) for d, _ in tensors)
    shapes = [tuple(d) if _is_tensor(d) else () for d in dims]
    try:
        flops, out = _matrix_cost(op, name, shapes)
    except (IndexError, ValueError):  # an overload with other arguments: priced as vector work
        flops, out = None, largest
    if flops is not None:
        return OpCost(int(flops), in_bytes + out * width, True, math_dtype(name, dtype))
    if op in LINALG_OPS:
        flops = linalg_flops(op, shapes[0])
        if flops is not None:
            return OpCost(flops, in_bytes + largest * width, True, dtype)
    if op in _COPY_OPS:
        return OpCost(0, 2 * numel(tensors[0][0]) * width, False, dtype)
    if op == "aten::embedding":  # (weight, indices): one row read and written per index
        rows = numel(shapes[1]) if len(shapes) > 1 else 0
        row = shapes[0][-1] if shapes[0] else 1
        return OpCost(0, in_bytes - numel(shapes[0]) * width + 2 * rows * row * width, False, dtype)
    out = largest if not _reduces(op) else 1
    return OpCost(vector_flops(op, largest), in_bytes + out * width, False, dtype)


def _matrix_cost(op: str, name: str, shapes: list[tuple[int, ...]]) -> tuple[int | None, int]:
    """(flops, output elements) of a matrix op, (None, 0) for any other op."""
    if op in ("aten::mm", "aten::bmm", "aten::matmul", "aten::linear"):
        a, b = shapes[0], shapes[1]
        if op == "aten::linear":  # weight (n, k): x @ weight.T
            b = (b[-1], b[0])
            out = numel(a[:-1]) * b[-1]
            bias = out if len(shapes) > 2 and shapes[2] else 0
            return mm_flops((numel(a[:-1]), a[-1]), b) + bias, out
        if len(b) == 1:  # matrix @ vector
            return 2 * numel(a), numel(a[:-1])
        return mm_flops(a, b), mm_batch(a, b) * a[-2] * b[-1]
    if op in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation", "aten::addbmm"):
        a, b = shapes[1], shapes[2]
        out = (numel(a[:-2]) if len(a) > 2 else 1) * a[-2] * b[-1]
        return matrix_flops(op, shapes, out), out
    if op == "aten::convolution":
        inp, weight = shapes[0], shapes[1]
        out = inp[0] * weight[0] * numel(inp[2:])  # stride 1, same padding: ASSUMPTION
        return matrix_flops(op, shapes, out), out
    if name in _CONV_GRAD_ONE or op in (
        "aten::convolution_backward",
        "aten::cudnn_convolution_backward",
        "aten::miopen_convolution_backward",
    ):
        return _conv_backward(name, shapes)
    if is_attention(op):
        flops = matrix_flops(op, shapes, numel(shapes[0]) if shapes else 0)
        return flops, numel(shapes[0]) if flops is not None else 0
    return None, 0


def _conv_backward(name: str, shapes: list[tuple[int, ...]]) -> tuple[int, int]:
    """cuDNN's split backward (input or weight gradient: one product) and the fused one
    (``(input, grad_out, weight)`` for cuDNN / MIOpen, ``(grad_out, input, weight)`` for
    aten::convolution_backward: both gradients)."""
    if name == "aten::cudnn_convolution_backward_input":  # (sizes, grad_out, weight)
        grad_out, weight = shapes[1], shapes[2]
        grad_in = numel(grad_out) // max(1, weight[0]) * weight[1]  # stride 1: ASSUMPTION
        return conv_flops((), weight, numel(grad_out), False), grad_in
    if name == "aten::cudnn_convolution_backward_weight":  # (sizes, grad_out, input)
        grad_out, inp = shapes[1], shapes[2]  # the weight's shape is not recorded
        flops = 2 * numel(grad_out) * inp[1] * UNKNOWN_KERNEL_ELEMS
        return flops, grad_out[1] * inp[1] * UNKNOWN_KERNEL_ELEMS
    if name == "aten::convolution_backward":
        grad_out, inp, weight = shapes[0], shapes[1], shapes[2]
    else:
        inp, grad_out, weight = shapes[0], shapes[1], shapes[2]
    fwd = conv_flops(inp, weight, numel(grad_out), False)
    return 2 * fwd + numel(grad_out), numel(inp) + numel(weight)


_REDUCTIONS = frozenset(
    {
        "aten::sum",
        "aten::mean",
        "aten::max",
        "aten::min",
        "aten::amax",
        "aten::amin",
        "aten::norm",
        "aten::linalg_vector_norm",
        "aten::nll_loss_forward",
        "aten::nll_loss",
        "aten::argmax",
        "aten::argmin",
        "aten::all",
        "aten::any",
    }
)


def _reduces(op: str) -> bool:
    return op in _REDUCTIONS


def _foreach_cost(op: str, dims: Sequence[Shape]) -> OpCost:
    """A ``_foreach_`` op over tensor lists, priced as the emulator prices it: every tensor of
    every list read, the first list's tensors written (in place or as new tensors), the op's
    elementwise flops over the first list. A TensorList's dtype is not recorded: float32
    (ASSUMPTION)."""
    width = DTYPE_BYTES["float32"]
    lists = [[tuple(t) for t in d] for d in dims if _is_tensor_list(d)]
    single = [tuple(d) for d in dims if _is_tensor(d)]  # a tensor argument (a scalar tensor)
    first = sum(numel(t) for t in lists[0])
    read = sum(numel(t) for ts in lists for t in ts) + sum(numel(t) for t in single)
    return OpCost(vector_flops(op, first), (read + first) * width, False, "float32")


def _is_tensor_list(dims: object) -> bool:
    return (
        isinstance(dims, (list, tuple))
        and len(dims) > 0
        and all(isinstance(t, (list, tuple)) for t in dims)
    )


def _is_tensor(dims: object) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) > 0 and isinstance(dims[0], int)


def _dtype(trace_type: object) -> str:
    if not isinstance(trace_type, str):
        return "float32"
    return TRACE_TYPES.get(trace_type, trace_type.removeprefix("c10::").lower() or "float32")
