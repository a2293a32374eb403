"""Where device activities go in a torch.profiler trace: shared by the live collector and the
offline merge, so both write the same structure.

Kineto maps ``pid`` = activity.device and ``tid`` = activity.resource. Host processes use their
OS pid (large numbers), so NeuronCore N is pid ``N`` and sorts after the host via its sort index.
"""

from __future__ import annotations

from neuron_profiler.runtime_trace.activities import ActivityKind, Queue
from neuron_profiler.trace.kinds import FALLBACK_NAME_PREFIX

CORE_SORT_INDEX_BASE = 0x10000000  # host processes sort first (their sort index is their pid)


def core_pid(core: int) -> int:
    return int(core)


def core_process_name(core: int) -> str:
    return f"NeuronCore {int(core)}"


def core_sort_index(core: int) -> int:
    return CORE_SORT_INDEX_BASE + int(core)


# Unknown event types (and instants) keep their whole runtime data as an arg; only these need
# each row's raw data bytes.
RAW_DATA_KINDS = frozenset({int(ActivityKind.GENERIC), int(ActivityKind.INSTANT)})

QUEUE_TIDS = {Queue.COMPUTE: 0, Queue.DMA: 1, Queue.COLLECTIVE: 2, Queue.OTHER: 3}
QUEUE_THREAD_NAMES = {Queue.COMPUTE: "compute", Queue.DMA: "DMA", Queue.COLLECTIVE: "collectives",
                      Queue.OTHER: "other"}

# Chrome-trace categories for device activities (Kineto's names, so every tool reads them).
CAT_KERNEL = "kernel"  # compute and collectives (collectives counted as device time; marked in args)
CAT_MEMCPY = "gpu_memcpy"  # DMA transfers
CAT_RUNTIME = "privateuse1_runtime"  # host runtime calls on the launching thread
CAT_DRIVER = "privateuse1_driver"  # unknown event types and instants (Kineto's driver type)
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
ARG_IS_FALLBACK = "cpu fallback"  # true on a CPU-fallback op (Kineto cannot give it a category of its own)
ARG_EXEC_ID = "exec_id"
ARG_SYNC = "sync"
ARG_DATA = "data"
ARG_SHAPES = "input shapes"
ARG_DTYPES = "input dtypes"

# Names of host-side activities on the launching thread (category CAT_RUNTIME). A fallback is
# recognisable by its name prefix and ARG_IS_FALLBACK: Kineto takes categories from activity types.
FALLBACK_PREFIX = FALLBACK_NAME_PREFIX  # one definition, shared with the loader
RUNTIME_PREFIX = "nrt launch: "
SYNC_PREFIX = "host sync: "

# Top-level trace metadata keys (live collector and offline merge).
META_SOURCE = "neuron_source"
META_DROPPED = "neuron_dropped_events"  # per core: ring-buffer drops the runtime reported
META_EXCLUDED = "neuron_excluded_outside_window"  # collector: launched outside the active window
META_OUTSIDE = "neuron_outside_host_window"  # merge: kept, but outside the host trace's span
META_MALFORMED = "neuron_malformed_events"
META_UNPAIRED = "neuron_unpaired_events"
META_ACTIVITIES = "neuron_activities"  # activities written into this trace
META_MODELLED = "neuron_timing_modelled"  # true: durations come from the emulator's model
META_LINK_ERROR = "neuron_link_error"
META_MERGED_FROM = "neuron_merged_from"
