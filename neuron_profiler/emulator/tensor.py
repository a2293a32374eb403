"""The emulated device's tensor: a wrapper subclass on ``neuron:N`` holding a real CPU tensor.

Every aten op on it reaches ``__torch_dispatch__`` and goes to the one execution point
(``dispatch.execute``). The ``"sizes"`` policy makes size/stride queries dispatch too, so they are
answered from the held tensor: ``out=``, ``resize_`` and in-place shape ops stay consistent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from neuron_profiler.emulator.host_cost import LEDGER
from neuron_profiler.emulator.outputs import resizable_storage
from neuron_profiler.errors import EmulatorError

_executor: Callable[[Any, tuple, dict], Any] | None = None
_aten = torch.ops.aten
_Base = torch._C.TensorBase
_METADATA: dict[Any, Callable[[torch.Tensor], Any]] = {
    # "sizes" policy: torch asks for whole sizes/strides through aten::size / aten::stride (the
    # profiler's record_shapes asks for every input of every op), symbolic code through sym_*
    _aten.size.default: _Base.size,
    _aten.stride.default: _Base.stride,
    _aten.sym_size.default: _Base.size,
    _aten.sym_stride.default: _Base.stride,
    _aten.dim.default: _Base.dim,
    _aten.sym_numel.default: _Base.numel,
    _aten.is_contiguous.default: _Base.is_contiguous,
    _aten.sym_storage_offset.default: _Base.storage_offset,
    _aten.is_non_overlapping_and_dense.default: _aten.is_non_overlapping_and_dense.default,
}
# whole sizes / strides: a tuple built and read back into C++, dearer than a scalar (host_cost.py)
_ARRAY_QUERIES = frozenset(
    (_aten.size.default, _aten.stride.default, _aten.sym_size.default, _aten.sym_stride.default)
)
_make_wrapper = torch.Tensor._make_wrapper_subclass
_devices: list[torch.device] = []


def set_executor(fn: Callable[[Any, tuple, dict], Any], cores: int) -> None:
    """Install the execution point and the device objects (called by ``enable``)."""
    global _executor
    _executor = fn
    _devices[:] = [torch.device("neuron", i) for i in range(cores)]
    _refuse_nested()


NESTED_UNSUPPORTED = (
    "nested tensors are not supported by the emulated neuron device: keep the nested tensor on "
    "the CPU, or pad it first (t.to_padded_tensor(0.0).to('neuron')). Nested tensors that ops "
    "make internally (nn.TransformerEncoder's fast path) are held on the host"
)
_nested_lib: list[torch.library.Library] = []


def _nested_unsupported(op: Any, *args: Any, **kwargs: Any) -> Any:
    raise EmulatorError(f"{op}: {NESTED_UNSUPPORTED}")


def _refuse_nested() -> None:
    """A nested tensor copied to the device (``nt.to("neuron")``), or made there
    (``torch.nested.nested_tensor(..., device="neuron")``, whose first op fails), reaches ATen's
    NestedTensorPrivateUse1 key, which has no kernels (torch says "Could not run 'aten::_to_copy'
    with arguments from the 'NestedTensorneuron' backend"): one clear error instead, from a
    fallback on that key. Registered once, at ``enable`` (never where another PrivateUse1 backend
    could own the key)."""
    if _nested_lib:
        return
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(_nested_unsupported, "NestedTensorPrivateUse1")
    _nested_lib.append(lib)


def swap_executor(fn: Callable[[Any, tuple, dict], Any]) -> Callable[[Any, tuple, dict], Any]:
    """Install ``fn`` as the execution point, returning the one it replaces (calibration)."""
    global _executor
    old, _executor = _executor, fn
    return old  # type: ignore[return-value]


class NeuronTensor(torch.Tensor):
    """A tensor on an emulated NeuronCore; ``_elem`` is its device memory (a CPU tensor)."""

    _elem: torch.Tensor
    _core: int
    # timing mode: the op whose modelled (not computed) values this tensor holds (modelled.py)
    _modelled: str | None = None

    @staticmethod
    def __new__(cls, elem: torch.Tensor, core: int) -> NeuronTensor:
        # Storage offset and layout are left at their defaults: under the "sizes" policy every
        # metadata query is answered from ``elem`` anyway (and this is the hot path).
        t = _make_wrapper(
            cls,
            elem.shape,
            elem.stride(),
            dtype=elem.dtype,
            device=_devices[core],
            dispatch_sizes_strides_policy="sizes",
        )
        t._elem = elem
        t._core = core
        return t

    @staticmethod
    def holding_nested(elem: torch.Tensor, core: int) -> NeuronTensor:
        """A device tensor whose memory is a (strided-layout) nested CPU tensor: what an op's
        nested result is (``torch._nested_tensor_from_mask`` and the encoder layer of
        ``nn.TransformerEncoder``'s fast path), held on the host. A wrapper subclass cannot be
        nested, so its metadata is that of the padded tensor (``is_nested`` is False and
        ``size()`` answers the padded size, where a nested tensor raises); every op on it still
        runs on the held nested tensor."""
        sizes = elem._nested_tensor_size()
        rest = sizes.amax(0).tolist() if sizes.shape[0] else [0] * (elem.dim() - 1)
        t = _make_wrapper(
            NeuronTensor, (sizes.shape[0], *rest), dtype=elem.dtype, device=_devices[core]
        )
        t._elem = elem
        t._core = core
        return t

    @staticmethod
    def holding_sparse(elem: torch.Tensor, core: int) -> NeuronTensor:
        """A sparse COO device tensor: a wrapper of that layout holding the sparse CPU tensor,
        whose indices and values are its memory; every op runs on the held tensor. (Compressed
        layouts cannot be wrappers: dispatch.new_device_tensor refuses them.)"""
        t = _make_wrapper(
            NeuronTensor,
            elem.shape,
            dtype=elem.dtype,
            device=_devices[core],
            layout=elem.layout,
            requires_grad=False,
            dispatch_sizes_strides_policy="sizes",
        )
        t._elem = elem
        t._core = core
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        # Size/stride queries (hundreds per training step under the "sizes" policy) are
        # answered here from the held tensor, skipping the execution point.
        fast = _METADATA.get(func)
        if fast is not None:
            # Python's cost of a C++ field read: emulator overhead
            if func in _ARRAY_QUERIES:
                LEDGER.array_queries += 1
            else:
                LEDGER.queries += 1
            return fast(args[0]._elem)
        return _executor(func, args, kwargs or {})  # type: ignore[misc]

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        body = repr(self._elem)
        suffix = f", device='{self.device}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return body[:-1] + suffix + ")"

    def untyped_storage(self) -> torch.UntypedStorage:
        """The device memory: the held tensor's storage, shared by every view of this buffer
        (the wrapper's own has no data). ``resize_`` on it frees / regrows the memory in place,
        as FSDP does (storage.py)."""
        return resizable_storage(self._elem)

    def data_ptr(self) -> int:
        """Address of the first element in the held storage: equal for tensors that alias."""
        return self._elem.data_ptr()

    def record_stream(self, stream: Any) -> None:
        """Device memory is freed when its last tensor goes (no caching allocator that could
        hand it to another stream early): nothing to record. ``torch.neuron.Stream`` is not a
        ``torch.Stream``, which the C++ method would demand (FSDP1 records its all-gather
        outputs)."""

    def tolist(self) -> Any:
        """As on CUDA: a device -> host copy (the host waits for it), then the list."""
        return torch.Tensor.cpu(self).tolist()

    def __coerce_same_metadata_as_tangent__(
        self, expected_metadata: Any = None, expected_type: Any = None
    ) -> NeuronTensor:
        """torch.compile traces a device tensor as a dense tensor on ``neuron`` (compiled.py):
        AOTAutograd's backward expects that type for gradients, and this is it."""
        return self

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:  # f"{loss:.3f}", as for CPU/CUDA scalars (a host read)
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)
