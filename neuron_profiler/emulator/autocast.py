"""bf16/fp16 autocast on the emulated device, with the same op policy as CPU autocast.

    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = model(x)        # equals CPU autocast on the same model and inputs

PyTorch has no autocast kernels for PrivateUse1, so this registers them: the ops CPU autocast
runs in lower precision (matmuls, convolutions, attention) cast floating inputs to the autocast
dtype, the ops it promotes (cat, stack, index_copy) cast to the widest input type, and every
other op CPU autocast registers runs in float32. Everything else falls through. Without a
``dtype`` argument, autocast on neuron uses bfloat16 (PyTorch's default for new backends is
float16).
"""

from __future__ import annotations

from typing import Any

import torch

LOWER_PRECISION = frozenset(
    {
        "aten::_addmm_activation",
        "aten::_convolution.deprecated",
        "aten::addbmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::bmm",
        "aten::conv1d",
        "aten::conv1d.padding",
        "aten::conv2d",
        "aten::conv2d.padding",
        "aten::conv3d",
        "aten::conv3d.padding",
        "aten::conv_tbc",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d.input",
        "aten::conv_transpose3d.input",
        "aten::linalg_vecdot",
        "aten::linear",
        "aten::matmul",
        "aten::mkldnn_rnn_layer",
        "aten::mm",
        "aten::prelu",
        "aten::scaled_dot_product_attention",
        "aten::_native_multi_head_attention",
    }
)
PROMOTE = frozenset({"aten::cat", "aten::stack", "aten::index_copy"})
_KEY = "AutocastPrivateUse1"
_libraries: list[torch.library.Library] = []


def _cast(x: Any, to: torch.dtype, only: tuple[torch.dtype, ...]) -> Any:
    if isinstance(x, torch.Tensor):
        if x.device.type == "neuron" and x.dtype in only and x.dtype != to:
            return x.to(to)
        return x
    if type(x) is list or type(x) is tuple:
        return type(x)([_cast(i, to, only) for i in x])
    return x


def _widest(args: tuple) -> torch.dtype:
    widest = None
    for x in args:
        for t in x if isinstance(x, (list, tuple)) else [x]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest or torch.float32


def _kernel(op: Any, policy: str) -> Any:
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    low = (torch.float32, torch.float16, torch.bfloat16)  # CPU autocast never casts float64
    half = (torch.float16, torch.bfloat16)

    def run(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            to = torch.get_autocast_dtype("neuron")
            args, kwargs = _cast(args, to, low), {k: _cast(v, to, low) for k, v in kwargs.items()}
        elif policy == "fp32":
            args = _cast(args, torch.float32, half)
            kwargs = {k: _cast(v, torch.float32, half) for k, v in kwargs.items()}
        else:
            to = _widest(args)
            args = _cast(args, to, low)
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args, **kwargs)

    return run


def _op(qualified: str) -> Any:
    ns, rest = qualified.split("::", 1)
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload or "default")


def register() -> None:
    """Install the policy; the float32 list is read from CPU autocast's own registrations."""
    if _libraries:
        return
    torch.set_autocast_dtype("neuron", torch.bfloat16)  # NeuronCores' native low precision
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    lib = torch.library.Library("aten", "IMPL")
    cpu_ops = [
        n
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCPU")
    ]
    for name in cpu_ops:
        policy = (
            "lower"
            if name in LOWER_PRECISION
            else "promote"
            if name.split(".")[0] in PROMOTE
            else "fp32"
        )
        try:
            op = _op(name)
        except AttributeError:
            continue
        lib.impl(name.split("::", 1)[1], _kernel(op, policy), _KEY)
    _libraries.extend([fallthrough, lib])
