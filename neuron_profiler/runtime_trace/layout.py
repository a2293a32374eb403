"""Where device activities go in a torch.profiler trace: shared by the live collector and the
offline merge, so both write the same structure.

Kineto maps ``pid`` = activity.device and ``tid`` = activity.resource. Host processes use their
OS pid (large numbers), so NeuronCore N is pid ``N`` and sorts after the host via its sort index.
"""

from __future__ import annotations

from neuron_profiler.runtime_trace.activities import Queue

CORE_SORT_INDEX_BASE = 0x10000000  # host processes sort first (their sort index is their pid)


def core_pid(core: int) -> int:
    return int(core)


def core_process_name(core: int) -> str:
    return f"NeuronCore {int(core)}"


def core_sort_index(core: int) -> int:
    return CORE_SORT_INDEX_BASE + int(core)


QUEUE_TIDS = {Queue.COMPUTE: 0, Queue.DMA: 1, Queue.COLLECTIVE: 2, Queue.OTHER: 3}
QUEUE_THREAD_NAMES = {Queue.COMPUTE: "compute", Queue.DMA: "DMA", Queue.COLLECTIVE: "collectives",
                      Queue.OTHER: "other"}

# Chrome-trace categories for device activities (Kineto's names, so every tool reads them).
CAT_KERNEL = "kernel"  # compute and collectives (collectives counted as device time; marked in args)
CAT_MEMCPY = "gpu_memcpy"  # DMA transfers
CAT_RUNTIME = "privateuse1_runtime"  # host runtime calls on the launching thread
CAT_FALLBACK = "cpu_fallback"  # CPU-fallback op marker on the launching thread (args carry details)
CAT_FLOW = "ac2g"

# Args keys written on device activities.
ARG_EMULATED = "emulated"  # true when the timing is modelled by the emulator
ARG_OP = "op"
ARG_FLOPS = "flops"
ARG_BYTES = "bytes"
ARG_TFLOPS = "achieved TFLOPS"
ARG_GBPS = "achieved GB/s"
ARG_DIRECTION = "direction"
ARG_BANDWIDTH = "bandwidth (GB/s)"
ARG_COLLECTIVE = "Collective name"  # NCCL's key, so peers' collective views read ours too
ARG_GROUP_RANKS = "Process Group Ranks"
ARG_GROUP_SIZE = "Group size"
ARG_ALGORITHM = "algorithm"
ARG_IS_COLLECTIVE = "neuron collective"
ARG_FALLBACK_REASON = "fallback reason"
