"""Storage operations on device tensors: what FSDP and other memory-managing code relies on.

A device tensor's memory is its held CPU tensor's storage (``NeuronTensor._elem``); the wrapper's
own storage (``_make_wrapper_subclass``) has no data, and PyTorch refuses to resize it ("invalid
python storage"). So:

- ``untyped_storage()`` and ``data_ptr()`` of a device tensor answer from the held storage
  (tensor.py): every view of one device buffer shares it, ``resize_(0)`` frees the memory they
  all see and ``resize_(n)`` regrows it in place, as FSDP2 does with its unsharded parameters
  (the aliasing autograd saved is kept). Timing mode's large zero-filled buffers are memory
  maps PyTorch cannot resize: the first ``untyped_storage()`` moves one into ordinary host
  memory in place (``outputs.resizable_storage``, a one-time copy).
- ``t.data = new`` (``set_data``): PyTorch's C++ check accepts only tensors of the same kind, and
  host and wrapper tensors are not (only the dense CPU/CUDA/... family shares one kind). Within the
  device the check passes and the setter also hands over the held tensor, which C++ never sees.
  Across host and device (FSDP moving a CPU module's parameters, ``param.data = param.to(dev)``)
  the tensor object keeps its identity and attributes and takes the new tensor's implementation
  (``_swap``), carrying ``requires_grad`` and the gradient over. An autograd graph recorded
  before keeps the old implementation; a backward through it that reaches the moved leaf's
  gradient accumulator raises (``_refuse_stale_backward``), as such a backward fails on CUDA.
- Module conversion (``nn.Module._apply``: ``.to()``, ``.cpu()``, ``.half()``) assigns ``.data``
  where ``torch._has_compatible_shallow_copy_type`` says the kinds match, as for CPU <-> CUDA;
  ``install`` makes it say so for a host and a device tensor, so a module's Parameter objects
  stay the same objects through ``.to("neuron")`` and ``.cpu()`` (tied weights stay tied, an
  optimizer made before keeps its parameters) by the ``.data`` rule above. Host-only conversions
  are untouched: torch's answer, torch's ``set_data``.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from neuron_profiler.emulator.tensor import NeuronTensor

_BASE_DATA = torch._C.TensorBase.data
_BASE_COMPATIBLE = torch._has_compatible_shallow_copy_type
_STRIDED = torch.strided
_installed: list[Any] = []
_refusing: list[bool] = [False]  # backward hooks' errors reach the caller (device.py's guard)
STALE_BACKWARD = (
    "backward through an autograd graph recorded before this tensor moved between host and "
    "device (.to() / .cpu() / .data =): run the forward again after the move (the emulated "
    "device cannot move a tensor under a graph that holds it: FSDP1's CPUOffload(offload_params"
    "=True), which moves its flat parameters with .data = every step, is not supported)"
)
WEAKLY_HELD = (
    "cannot move a tensor between host and device while a weak reference to it exists (the "
    "emulated device moves it by taking another tensor's implementation, which torch refuses "
    "for weakly referenced tensors; torch.compile leaves weak references on the parameters a "
    "compiled function read: move the module first, or call torch._dynamo.reset() before)"
)


def _get_data(self: torch.Tensor) -> torch.Tensor:
    return _BASE_DATA.__get__(self)


def _set_data(self: torch.Tensor, new: torch.Tensor) -> None:
    """``self.data = new`` for host and device tensors alike (module docstring)."""
    mine, theirs = isinstance(self, NeuronTensor), isinstance(new, NeuronTensor)
    if mine == theirs:
        _BASE_DATA.__set__(self, new)
        if mine:  # the C++ shallow copy moved sizes and strides, not the memory: hand it over
            self._elem, self._core, self._modelled = new._elem, new._core, new._modelled
        return
    _retype(self, new)


def _retype(self: torch.Tensor, new: torch.Tensor) -> None:
    """Give ``self`` the implementation of ``new`` (host <-> device) in place; refused before
    anything changes where it cannot be done (a weak reference to ``self`` or its gradient)."""
    grad = self.grad
    if weakref.getweakrefs(self) or (grad is not None and weakref.getweakrefs(grad)):
        raise RuntimeError(WEAKLY_HELD)
    old_dict = dict(self.__dict__)
    for held in ("_elem", "_core", "_modelled"):  # the new implementation's, not the old
        old_dict.pop(held, None)
    is_param = isinstance(self, torch.nn.Parameter)
    with torch.no_grad():
        donor = _donor(new)
    donor.requires_grad_(self.requires_grad)
    if grad is not None:
        self.grad = None
    _refuse_stale_backward(self)
    _swap(self, donor)
    self.__dict__.update(old_dict)
    if is_param:  # nn.Parameter's isinstance check reads this flag on non-Parameter classes
        self._is_param = True
    if grad is not None:  # the same gradient object, moved along (a grad must match its tensor)
        with torch.no_grad():
            moved = grad.to(self.device, self.dtype)
        if moved is not grad:
            _retype(grad, moved)
        self.grad = grad


def _raise_stale(*_: Any) -> None:
    raise RuntimeError(STALE_BACKWARD)


def _refuse_stale_backward(t: torch.Tensor) -> None:
    """Before ``t`` (a leaf that requires grad) gives up its implementation: a graph recorded
    before holds that implementation's gradient accumulator, and a backward reaching it would
    accumulate into the old tensor (computed from the old values); it raises instead, as
    torch's ``swap_tensors`` poisons the accumulator. A new accumulator (no graph held one)
    dies here with its hook. Only where a backward hook's exception reaches the caller (the
    memory extension's device guard, device.py): elsewhere it would end the process."""
    if _refusing[0] and t.requires_grad and t.grad_fn is None:
        torch.autograd.graph.get_gradient_edge(t).node.register_prehook(_raise_stale)


def _donor(new: torch.Tensor) -> torch.Tensor:
    """A fresh tensor object with ``new``'s memory, whose implementation ``self`` takes."""
    if isinstance(new, NeuronTensor):
        donor: torch.Tensor = NeuronTensor(new._elem, new._core)
        donor._modelled = new._modelled
        return donor
    return torch.Tensor._make_subclass(torch.Tensor, new.detach(), False)


def _swap(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """``torch.utils.swap_tensors(t1, t2)`` where other holders of ``t1``'s implementation
    (an autograd graph that saved it, a view of it) keep the old one, as ``set_data`` on CUDA
    leaves a view its old memory. torch refuses those (its module conversion does not need it
    between dense kinds, which assign ``.data``); here the host <-> device ``.data`` rule needs
    it. A backward through a graph recorded before would compute with the old values and
    accumulate into the old implementation, not ``t1``: ``_refuse_stale_backward`` (docs/emulator.md,
    Module conversion)."""
    if weakref.getweakrefs(t1) or weakref.getweakrefs(t2):
        raise RuntimeError(WEAKLY_HELD)
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    torch._C._swap_tensor_impl(t1, t2)


def _compatible(self: torch.Tensor, from_: torch.Tensor) -> bool:
    """``torch._has_compatible_shallow_copy_type`` that also pairs a host and a device tensor
    (module docstring): ``nn.Module._apply`` then converts by ``.data =``."""
    if isinstance(self, NeuronTensor) != isinstance(from_, NeuronTensor):
        return self.layout is _STRIDED and from_.layout is _STRIDED
    return _BASE_COMPATIBLE(self, from_)


def install(refuse_stale_backward: bool) -> None:
    """Route ``Tensor.data`` assignment through ``_set_data`` and module conversion's kind check
    through ``_compatible`` (idempotent, process-wide); ``refuse_stale_backward``: a backward
    hook's exception reaches the caller, so a stale graph's backward may raise."""
    _refusing[0] = refuse_stale_backward
    if _installed:
        return
    _installed.append(torch.Tensor.__dict__.get("data"))
    torch.Tensor.data = property(_get_data, _set_data, doc=_BASE_DATA.__doc__)
    torch._has_compatible_shallow_copy_type = _compatible
