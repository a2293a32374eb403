"""Ops a Neuron device runs on the host (CPU fallback): the emulator's default set and the
projection's, one table.

The set holds ops that compiler-based (XLA-class) accelerator backends commonly lack: ops whose
output shape depends on the data (nonzero, masked_select, unique) and dense linear-algebra
factorisations. float64 inputs fall back whatever the op (NeuronCores have no FP64 datapath).
"""

from __future__ import annotations

FALLBACK_DTYPES = frozenset({"float64"})

DEFAULT_FALLBACK_OPS = frozenset(
    {
        # data-dependent output shape: a static-shape compiler cannot produce these on device
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::bincount",
        "aten::histc",
        # dense factorisations and order statistics
        "aten::linalg_eigh",
        "aten::_linalg_eigh",
        "aten::linalg_qr",
        "aten::_linalg_svd",
        "aten::linalg_inv_ex",
        "aten::_linalg_det",
        "aten::linalg_cholesky_ex",
        "aten::median",
        "aten::nanmedian",
        "aten::kthvalue",
    }
)


def normalise_op(name: str) -> str:
    """An op as the fallback tables name it: namespace (``aten`` where none is given) and
    overload packet, no overload: ``"nonzero"`` and ``"aten::nonzero.default"`` ->
    ``"aten::nonzero"``; an in-place variant keeps its ``_`` (``out_of_place`` drops it).
    The one rule of what-if edits, the metadata's fallback list, the emulator's configured set
    and the projection's table lookups."""
    space, _, op = name.strip().rpartition("::")
    return f"{space or 'aten'}::{op.split('.', 1)[0]}"


def out_of_place(op: str) -> str:
    """The op an in-place variant belongs to: one trailing ``_`` less (``aten::add_`` ->
    ``aten::add``); a dunder op (``aten::__and__``) is its own."""
    return op[:-1] if op.endswith("_") and not op.endswith("__") else op


def falls_back(op: str, dtype: str) -> bool:
    """Whether a Neuron device runs ``op`` (any overload; the in-place variant included) with
    inputs of ``dtype`` on the host by default."""
    op = normalise_op(op)
    return (
        op in DEFAULT_FALLBACK_OPS
        or out_of_place(op) in DEFAULT_FALLBACK_OPS
        or (dtype in FALLBACK_DTYPES)
    )
