"""The Neuron runtime system-trace format (``nrt_sys_trace_fetch_events`` JSON) and our extension.

Real runtime envelope: ``{"events": [...], "data_version": 2}``; each event has ``event_type``,
``phase`` (start/stop/instant/unknown), ``id``, ``tracking_id`` (pairs start with stop),
``nc_idx``, ``thread_id``, ``timestamp_ns`` (Unix-epoch ns), optional ``nrta_seq_id`` and a
type-specific ``data`` object (see docs/runtime-events.md and its public sources).

The emulator writes the same shape. What it knows beyond the real runtime goes *only* under
``data[EXT_KEY]`` (a nested object), so a parser can always tell real fields from ours. Event
types that exist only in the emulator start with ``EXT_EVENT_PREFIX``. docs/runtime-events.md is
the prose version of this module.
"""

from __future__ import annotations

from neuron_profiler.trace import vocabulary as V

DATA_VERSION = 2
EXT_KEY = "neuron_profiler"  # data["neuron_profiler"] = {...}: this project's extension fields
EXT_EVENT_PREFIX = "neuron_profiler."  # event types the real runtime does not emit

# Phases
START, STOP, INSTANT, UNKNOWN = "start", "stop", "instant", "unknown"

# Real runtime event types the emulator also emits.
NC_EXEC_RUNNING = "nc_exec_running"  # device execution of one op/kernel (start/stop)
CC_RUNNING = "cc_running"  # collective on the collective queue (start/stop)
CC_EXEC_BARRIER = "cc_exec_barrier"  # device waiting for the replica group before a collective
TIMESTAMP_SYNC_POINT = "timestamp_sync_point"  # maps nc clock -> host clock (instant)
DMEM_BUF_COPYIN = "dmem_buf_copyin"  # host -> device transfer (start/stop)
DMEM_BUF_COPYOUT = "dmem_buf_copyout"  # device -> host transfer (start/stop)
NRT_TENSOR_ALLOCATE = "nrt_tensor_allocate"  # instant, data {tensor_id, size}
NRT_TENSOR_FREE = "nrt_tensor_free"  # instant, data {tensor_id, size}
# device memory alloc / dealloc (start: intent, stop: result; docs/runtime-events.md)
NRT_DMA_MEM_ALLOC = "nrt_dma_mem_alloc"
NRT_DMA_MEM_DEALLOC = "nrt_dma_mem_dealloc"
DMA_MEM_TYPES = frozenset({NRT_DMA_MEM_ALLOC, NRT_DMA_MEM_DEALLOC})
DATA_USAGE_TYPE = "usage_type"  # the usage category's name (intent; results may repeat it)
DATA_USAGE_TYPE_TOTAL = "usage_type_total_bytes"  # the category's bytes in use after the call
DATA_TOTAL_BYTES = "total_bytes"  # all bytes in use after the call
NRT_MODEL_SUBMIT = "nrt_model_submit"  # host runtime call that launches device work (start/stop)
NRT_EXECUTE = "nrt_execute"  # host runtime call (real runtime, synchronous execute)
NRTA_EXECUTE_SCHEDULE = "nrta_execute_schedule"  # host runtime call (async execution API)
NRT_TENSOR_WRITE = "nrt_tensor_write"  # host runtime call starting a host -> device copy
NRT_TENSOR_READ = "nrt_tensor_read"  # host runtime call starting a device -> host copy
KBL_EXEC_PRE = "kbl_exec_pre"  # host execution stages (host clock): carry exec_id, model_id
KBL_EXEC_CORE = "kbl_exec_core"
KBL_EXEC_WAIT = "kbl_exec_wait"
KBL_EXEC_POST = "kbl_exec_post"

# Emulator-only event types (our extension).
EXT_DMA_D2D = EXT_EVENT_PREFIX + "dma_d2d"  # device -> device transfer (start/stop)
EXT_HOST_SYNC = EXT_EVENT_PREFIX + "host_sync"  # host blocked on the device (start/stop, host)
EXT_FALLBACK = EXT_EVENT_PREFIX + "cpu_fallback"  # op run on the host (start/stop, host thread)
# The emulator's own host work that a real device would not cost the host: the op's math in
# numerics mode, the arrival exchange of coupled collectives (start/stop, host thread).
EXT_EMULATOR_OVERHEAD = EXT_EVENT_PREFIX + "emulator_overhead"

HOST_CALL_TYPES = frozenset(
    {NRT_MODEL_SUBMIT, NRT_EXECUTE, NRTA_EXECUTE_SCHEDULE, NRT_TENSOR_WRITE, NRT_TENSOR_READ}
)
DEVICE_EXEC_TYPES = frozenset({NC_EXEC_RUNNING})
DMA_TYPES = frozenset({DMEM_BUF_COPYIN, DMEM_BUF_COPYOUT, EXT_DMA_D2D})
COLLECTIVE_TYPES = frozenset({CC_RUNNING})
COLLECTIVE_WAIT_TYPES = frozenset({CC_EXEC_BARRIER})
EXEC_STAGE_TYPES = frozenset({KBL_EXEC_PRE, KBL_EXEC_CORE, KBL_EXEC_WAIT, KBL_EXEC_POST})
TENSOR_EVENT_TYPES = frozenset({NRT_TENSOR_ALLOCATE, NRT_TENSOR_FREE})
EMULATED_EVENT_TYPES = frozenset(
    {  # every type the emulator records
        NC_EXEC_RUNNING,
        CC_RUNNING,
        CC_EXEC_BARRIER,
        TIMESTAMP_SYNC_POINT,
        DMEM_BUF_COPYIN,
        DMEM_BUF_COPYOUT,
        NRT_TENSOR_ALLOCATE,
        NRT_TENSOR_FREE,
        NRT_MODEL_SUBMIT,
        NRT_TENSOR_WRITE,
        NRT_TENSOR_READ,
        EXT_DMA_D2D,
        EXT_HOST_SYNC,
        EXT_FALLBACK,
        EXT_EMULATOR_OVERHEAD,
    }
)

# Keys of the real runtime's data object that the parser and the placement read.
DATA_EXEC_ID = "exec_id"  # the execution a device event or kbl_exec_* stage belongs to
DATA_NC_TIMESTAMP_NS = "nc_timestamp_ns"  # device-side stamp (the device clock)
DATA_CPU_TIMESTAMP_NS = "cpu_timestamp_ns"  # timestamp_sync_point: the host stamp of the pair
DATA_ALGORITHM = "algorithm"  # cc_running: the collective algorithm (may be absent)
DATA_SIZE = "size"  # dmem_buf_copy*, nrt_tensor_*: bytes

# Queue names (emulator extension field data[EXT_KEY]["queue"]; also the collector's thread names).
QUEUE_COMPUTE, QUEUE_DMA, QUEUE_COLLECTIVE = "compute", "dma", "collective"
QUEUES = (QUEUE_COMPUTE, QUEUE_DMA, QUEUE_COLLECTIVE)

# DMA directions (data[EXT_KEY]["direction"]).
H2D, D2H, D2D = V.DIR_H2D, V.DIR_D2H, V.DIR_D2D

# Keys inside data[EXT_KEY] (all optional; present when the emulator knows them).
X_OP = "op"  # aten op name, e.g. "aten::mm"
X_FLOPS = "flops"  # int
X_BYTES = "bytes"  # int, bytes moved (HBM traffic for kernels, transfer size for DMA/collectives)
X_QUEUE = "queue"  # one of QUEUES
X_DIRECTION = "direction"  # one of H2D, D2H, D2D
X_CORRELATION_ID = "correlation_id"  # torch.profiler correlation id of the launching op (0: none)
X_EXEC_ID = "exec_id"  # runtime call: the execution it launched (the real runtime says it only
# on the kbl_exec_* stages inside the call; the emulator records no stages)
X_LAUNCH_NS = "launch_ns"  # host time the op was launched (Unix-epoch ns)
X_COLLECTIVE_OP = "collective"  # "allreduce", "allgather", ...
X_RANKS = "ranks"  # list[int], group ranks
X_ALGORITHM = "algorithm"  # "ring", ...
X_REASON = "reason"  # fallback reason
X_SHAPES = "shapes"  # fallback input shapes
X_DTYPES = "dtypes"  # fallback input dtypes
X_MODELLED = "modelled"  # True: duration comes from the emulator's model, not hardware
X_DTYPE = "dtype"
X_ENGINE = "engine"  # kernel: the NeuronCore engine it is modelled on (TensorE, VectorE, ...)
X_DEVICE_PROPERTIES = "device_properties"  # envelope extension: deviceProperties per core
X_DROPPED_EVENTS = "dropped_events"  # envelope extension: {core: events dropped since last fetch}
X_EMULATED = "emulated"  # envelope extension: true from the emulator
X_CHIP = "chip"  # envelope extension: the emulated chip's name
X_SPEED_FACTOR = "speed_factor"  # envelope extension: the emulator's speed factor
X_TOO_DEEP = "too_deep"  # true: the parser replaced a data object nested too deeply to decode
X_SYNC_REASON = "sync"  # why the host synced: "item", "cpu", "synchronize", "fallback", ...
X_WAIT_UNTIL_NS = "wait_until_ns"  # host_sync: device time (host clock) the host waited for
X_GROUP = "group"  # collective: process-group name
X_COLLECTIVE_WAIT = "collective_wait"  # cc_exec_barrier: true (the device waits for the group)
X_PCT_PEAK = "pct_of_peak"  # kernel: % of the compute peak of its engine and dtype; DMA: of the
# link's bandwidth (both after the speed factor)
X_OVERHEAD = "overhead"  # emulator_overhead: what the host did (one of OVERHEAD_*)
# emulator_overhead: the emulator's host time just before / after the span (ns; after < 0: the
# span's last ns are not the emulator's), drawn outside it so that the span nests in the host
# calls around it (host_cost.py)
X_BEFORE_NS, X_AFTER_NS = "before_ns", "after_ns"
OVERHEAD_NUMERICS = "numerics"  # the op's real math (numerics mode)
# the host waiting for a late rank of a collective (its arrival time, or the data exchanged)
OVERHEAD_COUPLING = "collective_coupling"
OVERHEAD_PINNED_COPY = "pinned_copy"  # the data of a pinned-memory copy (the DMA reads it)
# the emulator's Python dispatch of an op beyond the modelled framework launch cost (host_cost.py)
OVERHEAD_DISPATCH = "dispatch"
# showing timing mode's warning that the program reads modelled values (once per op, modelled.py)
OVERHEAD_WARNING = "modelled_read_warning"
X_NUMERICS = "numerics"  # envelope / device properties: NUMERICS_COMPUTED or NUMERICS_SKIPPED
NUMERICS_COMPUTED, NUMERICS_SKIPPED = "computed", "skipped"
SYNC_QUEUE_FULL = V.SYNC_QUEUE_FULL  # host_sync reason: the bounded launch queue was full
# One execution of a compiled graph (torch.compile on the emulated device; a NEFF on Trainium):
X_GRAPH_ID = "graph_id"  # nc_exec_running / its call: the compiled graph's id (int)
X_GRAPH_OPS = "graph_ops"  # nc_exec_running: the graph's ops in order, each a dict with X_OP,
# X_OFFSET_NS (from the execution's start), X_DURATION_NS (its modelled share; the shares add up
# exactly to the execution's duration), X_FLOPS, X_BYTES (fused chains: their one read and one
# write, carried by the chain's last op) and X_ENGINE
X_OFFSET_NS = "offset_ns"
X_DURATION_NS = "duration_ns"
