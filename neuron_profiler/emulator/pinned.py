"""Pinned (page-locked) host memory for the emulated device: ``pin_memory()``, ``is_pinned()``.

    p = torch.randn(1024, 1024).pin_memory()      # DataLoader(pin_memory=True) does this too
    p.is_pinned()                                 # True
    d = p.to("neuron", non_blocking=True)         # the host returns after the launch

A copy from or into pinned memory needs no staging on the host: the DMA reads or writes the
buffer itself (copies.py). PyTorch's pinned allocator cannot be registered from Python, so
pinned memory here is ordinary host memory whose storage is registered as pinned for as long as
it lives: ``is_pinned`` asks whether a tensor's storage is one of them (views of a pinned
tensor share its storage, so they are pinned too).
"""

from __future__ import annotations

import itertools
import warnings
import weakref

import torch

from neuron_profiler.emulator import native

# storage address -> the number of its registration (an address is reused after a free: a late
# finalizer must not forget the newer registration at the same address)
_PINNED: dict[int, int] = {}
_numbers = itertools.count(1)


def is_pinned(t: torch.Tensor) -> bool:
    """Whether ``t`` (a host tensor) lives in memory registered by ``pin``."""
    try:
        address = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): never pinned
        return False
    return address in _PINNED or _pinned_in_cpp(address)


def _pinned_in_cpp(address: int) -> bool:
    """Whether C++ code allocated this buffer as pinned (the memory extension's pinned
    allocator, which DDP's reducer asks the PrivateUse1 hooks for)."""
    module = native.loaded()
    return module is not None and bool(module.is_pinned_ptr(address))


def pin(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in pinned memory: its sizes, and its strides when it is non-overlapping
    and dense (as PyTorch's ``_pin_memory``); contiguous otherwise."""
    if torch.ops.aten.is_non_overlapping_and_dense.default(t):
        out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    else:
        out = torch.empty(t.size(), dtype=t.dtype)
    out.copy_(t)
    storage = out.untyped_storage()
    address = storage.data_ptr()
    if address:  # an empty tensor has no memory to pin
        number = next(_numbers)
        _PINNED[address] = number
        weakref.finalize(storage, _forget, address, number)
    return out


def _forget(address: int, number: int) -> None:
    if _PINNED.get(address) == number:
        del _PINNED[address]


def register() -> torch.library.Library:
    """Host tensors' ``_pin_memory`` (what ``pin_memory()`` and DataLoader's pinning thread call)
    and ``is_pinned``: PyTorch asks the PrivateUse1 hooks for both, which Python cannot
    provide."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib.impl("_pin_memory", _pin_memory, "CPU")
        lib.impl("is_pinned", _is_pinned, "CPU")
    return lib


def _pin_memory(self: torch.Tensor, device: object = None) -> torch.Tensor:
    return pin(self)


def _is_pinned(self: torch.Tensor, device: object = None) -> bool:
    return is_pinned(self)
