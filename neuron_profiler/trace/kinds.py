"""Category -> EventKind: one table for every vendor spelling (CUDA, ROCm, MTIA, neuron, 2021)."""

from __future__ import annotations

from neuron_profiler.trace.schema import EventKind

CATEGORY_KINDS: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP, "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.USER_ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_USER_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME, "cuda_driver": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME, "mtia_runtime": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME, "privateuse1_driver": EventKind.RUNTIME,
    "kernel": EventKind.KERNEL, "mtia_ccp_events": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY, "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET, "memset": EventKind.MEMSET,
    "python_function": EventKind.PYTHON,
    "ac2g": EventKind.FLOW, "async": EventKind.FLOW, "async_cpu_to_gpu": EventKind.FLOW,
    "fwdbwd": EventKind.FLOW,
    "trace": EventKind.TRACE_META,
    "cpu_instant_event": EventKind.CPU_INSTANT,
    "cpu_fallback": EventKind.FALLBACK,
    "dataloader": EventKind.DATALOADER,
}


def kind_of(category: str) -> EventKind:
    return CATEGORY_KINDS.get(category.lower(), EventKind.OTHER)
