"""Host implementations of aten ops that PyTorch defines only for CUDA but picks for PrivateUse1,
and of ``_efficientzerotensor``, whose CPU result a device tensor cannot hold (see there).

    run = HOST_KERNELS.get(func, func)     # dispatch.py: what computes ``func`` on host tensors

ATen's recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell``, ``nn.GRUCell``) take the fused
cell kernels on CUDA, XPU and PrivateUse1 devices (aten/src/ATen/native/RNN.cpp), and autograd's
formulas for those ops call their fused backward kernels (derivatives.yaml). These kernels exist
only for CUDA, so the host (CPU) tensors that hold the emulated device's memory have none: these
functions compute the same results with plain torch math, with CUDA's output layout (the
backward kernels read the forward's ``workspace`` by it). They work on meta tensors too, so
timing mode's output plans (outputs.py) come from them. Half and bfloat16 compute in float32 as
CUDA's kernels do (``acc_type``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten
_Tensor = torch.Tensor
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _acc(t: _Tensor) -> _Tensor:
    """``t`` in the dtype CUDA's RNN kernels compute in (float32 for half and bfloat16)."""
    return t.float() if t.dtype in _LOW_PRECISION else t


def _check_cell(
    name: str,
    input_gates: _Tensor,
    hidden_gates: _Tensor,
    input_bias: _Tensor | None,
    hidden_bias: _Tensor | None,
    factor: int,
    prev: _Tensor,
) -> None:
    """CUDA's ``checkSizes``: a wrong shape is an error, not a silently broadcast result."""
    torch._check(input_gates.dim() == 2, lambda: f"{name}: input_gates must be 2-D")
    torch._check(
        input_gates.shape == hidden_gates.shape,
        lambda: f"{name}: input_gates and hidden_gates must have the same size",
    )
    gates = input_gates.shape[1]
    if input_bias is not None:
        torch._check(
            input_bias.dim() == 1 and input_bias.numel() == gates,
            lambda: f"{name}: input_bias must be 1-D with {gates} elements",
        )
        torch._check(
            hidden_bias is not None and hidden_bias.shape == input_bias.shape,
            lambda: f"{name}: hidden_bias must have input_bias's size",
        )
    torch._check(
        prev.dim() == 2 and prev.numel() == input_gates.shape[0] * gates // factor,
        lambda: f"{name}: the previous state must be 2-D with batch x {gates // factor} elements",
    )


def fused_lstm_cell(
    input_gates: _Tensor,
    hidden_gates: _Tensor,
    cx: _Tensor,
    input_bias: _Tensor | None = None,
    hidden_bias: _Tensor | None = None,
) -> tuple[_Tensor, _Tensor, _Tensor]:
    """``aten::_thnn_fused_lstm_cell``: (hy, cy, workspace); the workspace holds the activated
    gates (input, forget, cell, output) side by side, (batch, 4 * hidden) like ``input_gates``."""
    _check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx)
    dtype = input_gates.dtype
    gates = _acc(input_gates) + _acc(hidden_gates)
    if input_bias is not None and hidden_bias is not None:
        gates = gates + _acc(input_bias) + _acc(hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    ig, fg, cg, og = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = fg * _acc(cx) + ig * cg
    hy = og * cy.tanh()
    workspace = torch.cat([ig, fg, cg, og], 1)
    return hy.to(dtype), cy.to(dtype), workspace.to(dtype)


def fused_lstm_cell_backward_impl(
    grad_hy: _Tensor | None,
    grad_cy: _Tensor | None,
    cx: _Tensor,
    cy: _Tensor,
    workspace: _Tensor,
    has_bias: bool,
) -> tuple[_Tensor | None, _Tensor | None, _Tensor | None]:
    """``aten::_thnn_fused_lstm_cell_backward_impl``: (grad of the gates, grad of cx, grad of
    the bias or None). ``_thnn_fused_lstm_cell_backward`` (composite) hands the gates' gradient
    to both gate inputs and the bias gradient to both biases."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    dtype = workspace.dtype
    ig, fg, cg, og = _acc(workspace).chunk(4, 1)
    tanh_cy = _acc(cy).tanh()
    go = _acc(grad_hy) if grad_hy is not None else torch.zeros_like(tanh_cy)
    goc = _acc(grad_cy) if grad_cy is not None else torch.zeros_like(tanh_cy)
    gog = go * tanh_cy * (1 - og) * og
    gcx = go * og * (1 - tanh_cy * tanh_cy) + goc
    gig = gcx * cg * (1 - ig) * ig
    gfg = gcx * _acc(cx) * (1 - fg) * fg
    gcg = gcx * ig * (1 - cg * cg)
    grad_gates = torch.cat([gig, gfg, gcg, gog], 1).to(dtype)
    grad_cx = (gcx * fg).to(dtype)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


_GRU_WORKSPACE = 5  # CUDA's GRU_WORKSPACE_MULTIPLIER: r, z, n, hx, hn + hidden bias


def fused_gru_cell(
    input_gates: _Tensor,
    hidden_gates: _Tensor,
    hx: _Tensor,
    input_bias: _Tensor | None = None,
    hidden_bias: _Tensor | None = None,
) -> tuple[_Tensor, _Tensor]:
    """``aten::_thnn_fused_gru_cell``: (hy, workspace); the workspace is (batch, 5 * hidden):
    reset gate, update gate, new gate, hx, and the hidden new-gate term with its bias."""
    _check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    dtype = input_gates.dtype
    gi, gh = _acc(input_gates), _acc(hidden_gates)
    if input_bias is not None and hidden_bias is not None:
        gi = gi + _acc(input_bias)
        gh = gh + _acc(hidden_bias)
    ir, ii, in_ = gi.chunk(3, 1)
    hr, hi, hn = gh.chunk(3, 1)
    rg = (ir + hr).sigmoid()
    zg = (ii + hi).sigmoid()
    ng = (in_ + rg * hn).tanh()
    h = _acc(hx)
    hy = ng + zg * (h - ng)
    workspace = torch.cat([rg, zg, ng, h, hn], 1)
    return hy.to(dtype), workspace.to(dtype)


def fused_gru_cell_backward(
    grad_hy: _Tensor, workspace: _Tensor, has_bias: bool
) -> tuple[_Tensor, _Tensor, _Tensor, _Tensor | None, _Tensor | None]:
    """``aten::_thnn_fused_gru_cell_backward``: grads of (input gates, hidden gates, hx, input
    bias, hidden bias); the biases' are None without bias."""
    torch._check(
        grad_hy.dim() == 2
        and workspace.shape == (grad_hy.shape[0], grad_hy.shape[1] * _GRU_WORKSPACE),
        lambda: "_thnn_fused_gru_cell_backward: workspace must be (batch, 5 * hidden)",
    )
    dtype = grad_hy.dtype
    rg, zg, ng, hx, hn = _acc(workspace).chunk(_GRU_WORKSPACE, 1)
    go = _acc(grad_hy)
    gzg = go * (hx - ng) * (1 - zg) * zg
    ghx = go * zg
    gng = go * (1 - zg) * (1 - ng * ng)
    ghn = gng * rg
    grg = gng * hn * (1 - rg) * rg
    grad_input_gates = torch.cat([grg, gzg, gng], 1).to(dtype)
    grad_hidden_gates = torch.cat([grg, gzg, ghn], 1).to(dtype)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, ghx.to(dtype), None, None
    return (
        grad_input_gates,
        grad_hidden_gates,
        ghx.to(dtype),
        grad_input_gates.sum(0),
        grad_hidden_gates.sum(0),
    )


def efficient_zero_tensor(size: Any, **kwargs: Any) -> torch.Tensor:
    """``_efficientzerotensor`` on the device: a buffer of zeros. The CPU kernel's ZeroTensor has
    no data and lives by its ZeroTensor dispatch key, which a wrapper subclass cannot carry: held
    by a device tensor, its ops reached the CPU kernels as data-less tensors (``z + 1`` crashed
    the process, ``x @ z`` raised "data is not allocated yet"). Autograd's forward-mode formulas
    make these for missing tangents; zeros give them the same values. On meta tensors too."""
    return torch.zeros(size, **kwargs)


HOST_KERNELS: dict[Any, Callable[..., Any]] = {
    aten._efficientzerotensor.default: efficient_zero_tensor,
    aten._thnn_fused_lstm_cell.default: fused_lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: fused_lstm_cell_backward_impl,
    aten._thnn_fused_gru_cell.default: fused_gru_cell,
    aten._thnn_fused_gru_cell_backward.default: fused_gru_cell_backward,
}
