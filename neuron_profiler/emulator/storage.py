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
  (``torch.utils.swap_tensors``, as module conversion does: ``set_swap_module_params_on_
  conversion``), carrying ``requires_grad`` and the gradient over.
"""

from __future__ import annotations

from typing import Any

import torch

from neuron_profiler.emulator.tensor import NeuronTensor

_BASE_DATA = torch._C.TensorBase.data
_installed: list[Any] = []


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
    """Give ``self`` the implementation of ``new`` (host <-> device) in place."""
    old_dict = dict(self.__dict__)
    for held in ("_elem", "_core", "_modelled"):  # the new implementation's, not the old
        old_dict.pop(held, None)
    grad = self.grad
    is_param = isinstance(self, torch.nn.Parameter)
    with torch.no_grad():
        if isinstance(new, NeuronTensor):
            donor: torch.Tensor = NeuronTensor(new._elem, new._core)
            donor._modelled = new._modelled
        else:
            donor = torch.Tensor._make_subclass(torch.Tensor, new.detach(), False)
    donor.requires_grad_(self.requires_grad)
    if grad is not None:
        self.grad = None
    torch.utils.swap_tensors(self, donor)
    self.__dict__.update(old_dict)
    if is_param:  # nn.Parameter's isinstance check reads this flag on non-Parameter classes
        self._is_param = True
    if grad is not None:
        self.grad = grad.to(self.device)


def install() -> None:
    """Route ``Tensor.data`` assignment through ``_set_data`` (idempotent, process-wide)."""
    if _installed:
        return
    _installed.append(torch.Tensor.__dict__.get("data"))
    torch.Tensor.data = property(_get_data, _set_data, doc=_BASE_DATA.__doc__)
