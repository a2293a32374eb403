"""``torch.save`` / ``torch.load`` / pickle of device tensors, as on CUDA.

torch restores a checkpoint's storages by their location tag (``torch.serialization``'s package
registry): a CUDA storage is saved tagged ``cuda:N`` and loads back onto that GPU, and
``map_location="cuda"`` moves host storages there (``UntypedStorage.to``). A device tensor's
memory here is a host tensor held by a wrapper subclass, which has no c10 storage on the device,
so neither direction works by itself (the storage copy fails in the device allocator). This module
adds one package ahead of torch's (priority ``PRIORITY``):

- saving (``reduce``, called by ``NeuronTensor.__reduce_ex__``): the tensor is copied to the host
  (a device -> host copy, as ``.cpu()``) and its host storage is tagged ``neuron:N``; files and
  pickles hold ordinary host bytes, so ``map_location="cpu"`` (or a callable returning the
  storage) loads them anywhere, as CUDA checkpoints do;
- loading a storage for ``neuron`` / ``neuron:N`` (its tag, or ``map_location``): the host
  storage is kept and remembered with its core; torch's ``_rebuild_tensor`` (patched here, the
  one function every storage-backed tensor is rebuilt by, pickle and ``weights_only`` alike)
  copies it to the core once (one host -> device copy per storage: tensors that shared a storage
  in the file share device memory) and returns a device tensor viewing it.

Object collectives (``broadcast_object_list``, ``all_gather_object``, ...) pickle with this path,
so device tensors inside objects arrive on the device, as with NCCL.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

import torch

# ahead of torch's "cpu" (10) and PrivateUse1 (23) packages: a tag needs the host storage to be
# recognised before "cpu" claims it, and a restore must not reach torch's device copy
PRIORITY = 9
_LOCATION = re.compile(r"neuron(?::(\d+))?$")
# host storages that stand for device memory while being saved: storage -> core
_SAVED: weakref.WeakKeyDictionary[torch.UntypedStorage, int] = weakref.WeakKeyDictionary()
# host storages loaded for the device: storage -> [core, its device copy once made]
_LOADED: weakref.WeakKeyDictionary[torch.UntypedStorage, list[Any]] = weakref.WeakKeyDictionary()
_installed: list[Any] = []


def reduce(t: Any, protocol: Any) -> Any:
    """``NeuronTensor.__reduce_ex__`` (set by ``install``): ``torch.save`` / pickle store a
    device tensor as its host copy whose storage is tagged ``neuron:<core>``, which loads back
    onto the device, or anywhere with ``map_location="cpu"``, as a CUDA tensor does; a sparse
    one as its device indices and values (each tagged so), as torch pickles sparse."""
    core = t._core
    if t.layout is torch.sparse_coo:
        data = (t._indices(), t._values(), t.size(), t.is_coalesced())
        return (torch._utils._rebuild_sparse_tensor, (t.layout, data))
    torch.Tensor.cpu(t)  # the device -> host copy (waits for the device)
    storage = _host_storage(t._elem)
    host = torch.empty((0,), dtype=t.dtype).set_(
        storage, t._elem.storage_offset(), t._elem.size(), t._elem.stride()
    )
    host.requires_grad_(t.requires_grad)
    _SAVED[storage] = core
    return host.__reduce_ex__(protocol)


# device memory being saved -> its host copy: (device storage's address, size, the tensors'
# version counter) -> the copy, alive while a save holds it (torch.save keeps every storage it
# writes until it ends), so that tensors sharing device memory share one stored storage
_COPIES: weakref.WeakValueDictionary[tuple[int, int, int], torch.UntypedStorage] = (
    weakref.WeakValueDictionary()
)


def _host_storage(elem: torch.Tensor) -> torch.UntypedStorage:
    """One host copy of the whole device storage behind ``elem`` per save: views and tied
    weights keep their sharing in the file, as CUDA's do. A write through any view bumps the
    version counter they share, so a later save never reuses a stale copy."""
    device = elem.untyped_storage()
    key = (device.data_ptr(), device.nbytes(), elem._version)
    copy = _COPIES.get(key)
    if copy is None:
        copy = device.clone()
        _COPIES[key] = copy
    return copy


def _tag(storage: Any) -> str | None:
    core = _SAVED.get(storage) if isinstance(storage, torch.UntypedStorage) else None
    return None if core is None else f"neuron:{core}"


def _restore(storage: Any, location: str) -> Any:
    """A storage to load onto ``location`` when it names the device: the host storage itself,
    remembered with its core (``_rebuild_tensor`` makes the device tensor)."""
    m = _LOCATION.match(location)
    if m is None:
        return None
    from neuron_profiler.emulator.dispatch import STATE

    core = STATE.current_core if m.group(1) is None else int(m.group(1))
    if core >= STATE.num_cores:
        raise RuntimeError(
            f"Attempting to deserialize object on NEURON device {core} but "
            f"torch.neuron.device_count() is {STATE.num_cores}. Please use torch.load with "
            "map_location to map your storages to an existing device."
        )
    if isinstance(storage, torch.UntypedStorage) and storage.device.type == "cpu":
        _LOADED[storage] = [core, None]
    return storage


def _rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> torch.Tensor:
    """torch's ``_rebuild_tensor``; a storage loaded for the device gives a device tensor."""
    entry = _LOADED.get(storage._untyped_storage)
    if entry is None:
        return _installed[0](storage, storage_offset, size, stride)
    from neuron_profiler.emulator.tensor import NeuronTensor

    core, flat = entry
    if flat is None:  # the storage's host -> device copy, once
        host = torch.empty((0,), dtype=torch.uint8).set_(storage._untyped_storage)
        flat = entry[1] = host.to(torch.device("neuron", core))
    elem = torch.empty((0,), dtype=storage.dtype).set_(
        flat._elem.untyped_storage(), storage_offset, size, stride
    )
    return NeuronTensor(elem, core)


def install() -> None:
    """Register the package, pickle device tensors (``reduce``) and patch
    ``torch._utils._rebuild_tensor`` (once per process)."""
    if _installed:
        return
    import torch._utils as U

    from neuron_profiler.emulator.tensor import NeuronTensor

    NeuronTensor.__reduce_ex__ = reduce  # type: ignore[method-assign]
    _installed.append(U._rebuild_tensor)
    U._rebuild_tensor = _rebuild_tensor
    torch.serialization.register_package(PRIORITY, _tag, _restore)
