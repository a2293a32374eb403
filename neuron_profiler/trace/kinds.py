"""Category -> EventKind: one table for every vendor spelling (CUDA, ROCm, MTIA, neuron, 2021)."""

from __future__ import annotations

import numpy as np

from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.schema import EventKind

CATEGORY_KINDS: dict[str, EventKind] = {
    V.CAT_CPU_OP: EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.USER_ANNOTATION,
    V.CAT_GRAPH_OP: EventKind.GPU_USER_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
    V.CAT_RUNTIME: EventKind.RUNTIME,
    V.CAT_DRIVER: EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,  # Kineto's XPU (XPUPTI) activity types
    "xpu_driver": EventKind.RUNTIME,
    V.CAT_KERNEL: EventKind.KERNEL,
    "mtia_ccp_events": EventKind.KERNEL,
    V.CAT_MEMCPY: EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "python_function": EventKind.PYTHON,
    V.CAT_FLOW: EventKind.FLOW,
    "async": EventKind.FLOW,
    "async_cpu_to_gpu": EventKind.FLOW,
    "fwdbwd": EventKind.FLOW,
    "trace": EventKind.TRACE_META,
    "cpu_instant_event": EventKind.CPU_INSTANT,
    "cpu_fallback": EventKind.FALLBACK,
    "dataloader": EventKind.DATALOADER,
}


def kind_of(category: str) -> EventKind:
    return CATEGORY_KINDS.get(category.lower(), EventKind.OTHER)


# Kineto writes every host-side activity with the runtime category, so a CPU-fallback op is told
# apart by its name prefix; a tool that files it as an op (``cpu_op``) names the same call.
FALLBACK_NAME_PREFIX = V.FALLBACK_PREFIX
FALLBACK_HOST_KINDS = (EventKind.RUNTIME, EventKind.CPU_OP)


# MTIA's device rows all have one category (mtia_ccp_events); their names say which are work:
# a stream waiting for another stream's event (``event_wait``, arg ``wait_on_stream``) or
# recording one (``event_record``) keeps no engine busy, as CUDA's cudaStreamWaitEvent leaves no
# device row; ``dma_request`` (args ``direction``, ``size``) is a copy.
DEVICE_ROW_KINDS = {
    "event_wait": EventKind.OTHER,
    "event_record": EventKind.OTHER,
    "dma_request": EventKind.MEMCPY,
}


def refine_kinds(kind: np.ndarray, name_id: np.ndarray, strings: list[str]) -> np.ndarray:
    """Kinds that the category alone cannot tell: CPU-fallback ops (a host row of the runtime
    or the op category, ``FALLBACK_HOST_KINDS``, named ``CPU fallback: <op>``), and device rows
    named in ``DEVICE_ROW_KINDS`` (kernel category + name)."""
    fallback_ids = [i for i, text in enumerate(strings) if text.startswith(FALLBACK_NAME_PREFIX)]
    if fallback_ids:
        hit = np.isin(kind, np.array(FALLBACK_HOST_KINDS, kind.dtype)) & np.isin(
            name_id, np.asarray(fallback_ids, dtype=name_id.dtype)
        )
        kind = np.where(hit, np.uint8(EventKind.FALLBACK), kind).astype(kind.dtype)
    named = [(i, DEVICE_ROW_KINDS[t]) for i, t in enumerate(strings) if t in DEVICE_ROW_KINDS]
    for i, to in named:  # (a handful of names at most)
        kind = np.where((kind == EventKind.KERNEL) & (name_id == i), np.uint8(to), kind).astype(
            kind.dtype
        )
    return kind
