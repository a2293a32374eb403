"""The trace vocabulary: every category, name, args key and metadata key this project writes
into a torch.profiler trace or reads back out of one.

The live collector, the offline merge, the exporters and the analyses all read them from here,
so a key is spelled once::

    from neuron_profiler.trace import vocabulary as V
    trace.args(row).get(V.ARG_STREAM)

Device rows follow CUDA's shape so that every tool that reads CUDA traces reads ours (HTA,
torch's ``key_averages``, Perfetto): ``device``, ``stream`` and ``correlation`` args on device
work, Kineto's categories, CUDA's copy names. What CUDA has no word for carries our own keys.
Torch-free; docs/collector.md describes each key.
"""

from __future__ import annotations

# -- file names ----------------------------------------------------------------------------
# what torch's tensorboard_trace_handler writes ({worker}.{time_ns}.pt.trace.json[.gz]): a file
# named so is a trace, whatever it holds
TORCH_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")

# -- categories (Kineto's spellings, so every tool classifies our rows) ----------------------
CAT_KERNEL = "kernel"  # compute and collectives (collectives are device time; marked in args)
CAT_MEMCPY = "gpu_memcpy"  # DMA transfers
CAT_RUNTIME = "privateuse1_runtime"  # host runtime calls, host syncs, CPU fallbacks
CAT_DRIVER = "privateuse1_driver"  # tensor events and runtime event types we do not know
CAT_FLOW = "ac2g"  # arrow from a runtime call to the device work it launched
CAT_OVERHEAD = "overhead"  # the emulator's own host work (Kineto's word for profiler overhead)
# An op inside a compiled graph's execution, nested in it on the compute stream: CUDA's category
# for ranges projected on a device stream, which tools (and key_averages' totals) do not count
# as device work a second time.
CAT_GRAPH_OP = "gpu_user_annotation"
CAT_CPU_OP = (
    "cpu_op"  # torch's host ops (a Neuron Explorer profile's framework events become these)
)
# Counter ("C") samples of device memory in use: args are the usage categories in bytes, the
# total in use is their sum (docs/trace-model.md). Per Neuron device HBM (Neuron Explorer) or per
# NeuronCore (the collector: emulator and libnrt).
CAT_HBM_USAGE = "neuron_hbm_usage"
# Kineto's category of the counter activities the collector hands it (an activity type its
# JSON writer renders as a "C" event): the loader reads those named ``core_hbm_counter_name`` as
# CAT_HBM_USAGE.
CAT_KINETO_COUNTERS = "mtia_counters"

# -- args keys that CUDA traces carry too ----------------------------------------------------
ARG_EXTERNAL_ID = "External id"  # the launching aten op's correlation (Kineto writes it)
ARG_EXTERNAL_ID_2021 = "external id"  # its spelling on runtime and device rows in 2021 Kineto
ARG_DEVICE = "device"  # device work: the NeuronCore index
ARG_STREAM = "stream"  # device work: one id >= 1 per queue, unique within the trace
ARG_CORRELATION = "correlation"  # runtime call and its device work: equal to the ac2g flow id
ARG_COLLECTIVE = "Collective name"  # NCCL's key, so peers' collective views read ours too
ARG_GROUP_RANKS = "Process Group Ranks"
ARG_GROUP_SIZE = "Group size"
ARG_IN_MSG_NELEMS = "In msg nelems"  # NCCL collectives: elements each rank sends in

# -- args keys of our own ---------------------------------------------------------------------
ARG_EMULATED = "emulated"  # true: the timing is modelled by the emulator, not measured
ARG_OP = "op"  # the aten op a device row or runtime call belongs to
ARG_ENGINE = "engine"  # NeuronCore engine a kernel is modelled on (TensorE, VectorE, ...)
MATRIX_ENGINE = "TensorE"  # the NeuronCore engine of matrix work (docs/chips.md)
ARG_DTYPE = "dtype"  # a kernel's compute dtype
ARG_EXEC_ID = "exec_id"  # the runtime's execution id
ARG_FLOPS = "flops"
ARG_BYTES = "bytes"
ARG_TFLOPS = "achieved TFLOPS"
ARG_GBPS = "achieved GB/s"  # kernels and collectives: bytes / duration
ARG_BANDWIDTH = "bandwidth (GB/s)"  # DMA: bytes / duration
ARG_PCT_PEAK = "% of peak"  # kernels: achieved FLOP/s over the peak for their engine and dtype;
# DMA: bandwidth over the link's peak (emulator: both peaks after the speed factor)
ARG_DIRECTION = "direction"  # DMA: DIR_H2D, DIR_D2H or DIR_D2D
DIR_H2D, DIR_D2H, DIR_D2D = "h2d", "d2h", "d2d"  # copy directions (ARG_DIRECTION's values)
ARG_ALGORITHM = "algorithm"  # collective algorithm, when the runtime names it
ARG_IS_COLLECTIVE = "neuron collective"  # true on collectives (their category is kernel)
ARG_COLLECTIVE_WAIT = "collective wait"  # true on a cc_exec_barrier: device waiting for the group
ARG_IS_FALLBACK = "cpu fallback"  # true on a CPU-fallback op (Kineto gives it no category)
ARG_FALLBACK_REASON = "fallback reason"
ARG_SHAPES = "input shapes"
ARG_DTYPES = "input dtypes"
ARG_SYNC = "sync"  # host sync: why the host waited (item, cpu, synchronize, fallback, ...)
# ... or because the bounded launch queue was full: the host got ahead of a busy device
# (backpressure, never a sync the user wrote)
SYNC_QUEUE_FULL = "queue_full"
ARG_OVERHEAD = "emulator overhead"  # what the emulator did on the host: numerics, ...
# on an emulator-overhead span: the emulator's host time just before / after it (ns; after < 0:
# its last ns are the framework's), not drawn so that the span nests in the calls around it
ARG_OVERHEAD_BEFORE, ARG_OVERHEAD_AFTER = "overhead before (ns)", "overhead after (ns)"
# 1 on the emulator-overhead span: torch (>= 2.8) skips a Kineto activity whose metadata "hidden"
# is 1 when it builds key_averages() (pytorch#155213), so the span stays in the trace only.
ARG_HIDDEN = "hidden"
ARG_DATA = "data"  # unknown runtime events: their whole runtime data object
ARG_GRAPH_ID = "graph id"  # a compiled graph's execution and the ops nested in it
ARG_HOST_TIMED = "host-timed"  # true on a copy the runtime timed on the host (no device stamp)
# torch.profiler's allocator events (profile_memory=True): instant rows named MEMORY_EVENT with
# these args
MEMORY_EVENT = "[memory]"
ARG_MEM_ADDR, ARG_MEM_BYTES = "Addr", "Bytes"  # the block's address; bytes (< 0: a free)
ARG_MEM_DEVICE_TYPE, ARG_MEM_DEVICE_ID = "Device Type", "Device Id"  # c10's device type and index
ARG_MEM_TOTAL_ALLOCATED, ARG_MEM_TOTAL_RESERVED = "Total Allocated", "Total Reserved"
ARG_BYTES_KEYS = (ARG_BYTES, ARG_MEM_BYTES)  # how transfer sizes are spelled across producers
# torch.profiler's own args on cpu_op rows (record_shapes=True; "Call stack": with_stack=True in
# traces before python_function rows, frames innermost first, "file(line): function;...")
ARG_INPUT_DIMS_KEYS = ("Input Dims", "Input dims")
ARG_INPUT_TYPE = "Input type"
ARG_CALL_STACK = "Call stack"
# the loader's marker for a value nested too deeply to decode (args or a top-level key): the
# whole value becomes {ARG_REPLACED: "nested deeper than N levels"}
ARG_REPLACED = "neuron-profiler replaced"

# -- names -------------------------------------------------------------------------------------
# Host-side rows are prefixed so that they never read as the aten op they belong to
# (key_averages groups rows by name).
FALLBACK_PREFIX = "CPU fallback: "


def fallback_name(op: str) -> str:
    """The name of a CPU fallback call's row: ``"CPU fallback: aten::nonzero"``."""
    return FALLBACK_PREFIX + op


def fallback_op(name: str) -> str:
    """The op a CPU fallback row ran: its name without ``FALLBACK_PREFIX``; a row without the
    prefix (one filed as a fallback by its ``cpu_fallback`` category) is named after the op."""
    return name[len(FALLBACK_PREFIX) :] if name.startswith(FALLBACK_PREFIX) else name


# aten ops that only allocate (c10's factory functions and resizes): the emulator never computes
# them; the memory analysis passes over them when naming the op an allocation belongs to
ALLOCATION_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
    }
)
# aten ops that launch no device kernel: the allocations above, views and reshapes, metadata
# queries and stream / autograd bookkeeping. The CPU-only projection leaves them on the host
# (analysis/offload.py); the emulator runs the ones that allocate nothing as views (no kernel,
# no new memory: emulator/dispatch.py).
NO_KERNEL_OPS = ALLOCATION_OPS | frozenset(
    f"aten::{op}"
    for op in (
        # views and reshapes
        "view",
        "t",
        "transpose",
        "permute",
        "reshape",
        "_reshape_alias",
        "expand",
        "expand_as",
        "as_strided",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "narrow",
        "detach",
        "detach_",
        "alias",
        "_unsafe_view",
        "view_as",
        "flatten",
        "unflatten",
        "lift_fresh",
        "set_",
        "to",
        "contiguous",
        "resolve_conj",
        "resolve_neg",
        "conj",
        "_conj",
        # metadata
        "size",
        "stride",
        "numel",
        "dim",
        "is_same_size",
        "result_type",
        "_has_compatible_shallow_copy_type",
        # bookkeeping
        "requires_grad_",
        "record_stream",
    )
)
RUNTIME_PREFIX = "nrt launch: "
SYNC_PREFIX = "host sync: "
# The emulator's own host work (an op's real math in numerics mode, exchanging collective arrival
# times): never runtime launch cost. One row name per kind of work, not per op.
OVERHEAD_PREFIX = "emulator overhead: "
# DMA rows are named as CUDA names its copies, so tools that classify by name see copies.
MEMCPY_NAMES = {
    DIR_H2D: "Memcpy HtoD (Host -> NeuronCore)",
    DIR_D2H: "Memcpy DtoH (NeuronCore -> Host)",
    DIR_D2D: "Memcpy DtoD (NeuronCore -> NeuronCore)",
}
MEMCPY_UNKNOWN = "Memcpy (NeuronCore)"
COLLECTIVE_ENGINE = "CC"  # collectives: "CC: allreduce"
COLLECTIVE_WAIT_PREFIX = "CC wait: "  # cc_exec_barrier before a collective: "CC wait: allreduce"
COLLECTIVE_WAIT_NAME = "CC wait: barrier"  # a barrier no collective is named for (real captures)
DEFAULT_ENGINE = "NeuronCore"  # kernels whose engine the source does not say
DEFAULT_CHIP = "NeuronCore"  # a core's chip where its deviceProperties name none


def kernel_name(engine: str | None, op: str) -> str:
    """A device kernel's name: ``"<engine>: <op>"`` with the ``aten::`` namespace dropped
    (``TensorE: mm``), so it never equals the aten op that launched it."""
    short = op[len(ATEN_PREFIX) :] if op.startswith(ATEN_PREFIX) else op
    return f"{engine or DEFAULT_ENGINE}: {short}"


# -- device processes and queues ----------------------------------------------------------------
CORE_PROCESS_PREFIX = "NeuronCore "
CORE_SORT_INDEX_BASE = 0x10000000  # host processes sort first (their sort index is their pid)
RELOCATED_PID_BASE = 2**20  # a core whose pid the host trace uses moves to the first free one
QUEUE_NAMES = ("compute", "DMA", "collectives", "other")  # thread names, in queue order
STREAMS_PER_CORE = len(QUEUE_NAMES)


def core_process_name(core: int) -> str:
    return f"{CORE_PROCESS_PREFIX}{int(core)}"


def core_sort_index(core: int) -> int:
    return CORE_SORT_INDEX_BASE + int(core)


def queue_stream(core: int, queue: int) -> int:
    """Stream id (and thread id) of a core's queue: >= 1 and unique over every core."""
    return 1 + int(core) * STREAMS_PER_CORE + int(queue)


# -- deviceProperties keys -----------------------------------------------------------------------
PROP_ID = "id"
PROP_NAME = "name"
PROP_CHIP = "chip"
PROP_EMULATED = "emulated"
PROP_SPEED_FACTOR = "speed_factor"
PROP_HBM_BYTES = "hbm_bytes"
PROP_PEAK_BF16_TFLOPS = "peak_bf16_tflops"  # Tensor engine, BF16 (emulator: x speed factor)
PROP_PEAK_FP32_TFLOPS = "peak_fp32_tflops"  # Tensor engine, FP32
PROP_PEAK_TFLOPS = "peak_tflops"  # {engine: {dtype: TFLOPS}}: every compute peak the model uses
PROP_HBM_GBPS = "hbm_gbps"
PROP_HOST_LINK_GBPS = "host_link_gbps"  # host <-> device copies, per core
PROP_DMA_GBPS = "dma_gbps"  # device <-> device copies (the core's DMA engines)
PROP_COLLECTIVE_LINK_GBPS = "collective_link_gbps"  # collective ring link, per core
PROP_PEAKS_SPEED_FACTOR = "peaks_speed_factor"  # the speed factor already applied to the peaks
PROP_PEAKS_KNOWN = "peaks_known"  # false: the source gives no peak figures (real captures)
PROP_NUMERICS = "numerics"  # emulator: "computed" (numerics mode) or "skipped" (timing mode)
NUMERICS_COMPUTED, NUMERICS_SKIPPED = "computed", "skipped"

# -- top-level metadata keys ---------------------------------------------------------------------
META_BASE_TIME = "baseTimeNanoseconds"  # Kineto's: ts values are µs relative to this (ns)
META_DISTRIBUTED = "distributedInfo"  # Kineto's: the rank of a torch.distributed run
DIST_RANK, DIST_WORLD_SIZE = "rank", "world_size"  # keys of distributedInfo
DIST_BACKEND = "backend"  # distributedInfo: the process group's backend ("nccl", "gloo", ...)
META_SOURCE = "neuron_source"  # emulator, libnrt, merge, none, neuron_explorer
SOURCE_MERGE = "merge"  # META_SOURCE of a trace the offline merge wrote
SOURCE_EXPLORER = "neuron_explorer"  # META_SOURCE of a trace read from a Neuron Explorer profile
META_DROPPED = "neuron_dropped_events"  # per core: ring-buffer drops the runtime reported
DROPS_UNKNOWN = "unknown"  # META_DROPPED when the source does not report drops (libnrt)
META_EXCLUDED = "neuron_excluded_outside_window"  # collector: launched outside the active window
META_OUTSIDE = "neuron_outside_host_window"  # merge: kept, but outside the host trace's span
META_MALFORMED = "neuron_malformed_events"
META_UNPAIRED = "neuron_unpaired_events"
META_ACTIVITIES = "neuron_activities"  # activities written into this trace
META_MODELLED = "neuron_timing_modelled"  # true: durations come from the emulator's model
META_PEAKS = "neuron_peaks"  # "modelled" (emulator figures) or "unknown" (no peaks in capture)
META_NUMERICS = "neuron_numerics"  # emulator: "computed" or "skipped" (timing mode: not computed)
META_LINK_ERROR = "neuron_link_error"
META_UNMAPPED = "neuron_unmapped_events"  # device events no sync point could place (left out)
META_HIDDEN_TYPES = "neuron_hidden_event_types"  # captured event types with events shown nowhere
META_UNLINKED_CALLS = "neuron_unlinked_runtime_calls"  # calls no host op contains (other threads)
META_TRUNCATED = "neuron_truncated_envelopes"  # cut-off capture envelopes (complete events kept)
META_RUNTIME_VERSION = "neuron_runtime_version"  # libnrt's nrt_get_version, when it has one
META_MERGED_FROM = "neuron_merged_from"
META_RELOCATED_CORES = "neuron_relocated_cores"  # core -> pid, where the host used the core's pid
META_COLLECTOR_ERROR = "neuron_collector_error"
META_UNAVAILABLE = "neuron_collector_unavailable"  # why a NEURON profile has no device rows
# collector: torch_neuronx.get_fallback_ops() at the end of the session (sorted op names), when
# torch_neuronx has it; the analyzer infers fallbacks on real hardware from it
META_FALLBACK_OPS = "neuron_fallback_ops"
# collector: where each HBM usage category's figures come from, {category: HBM_FROM_*}
META_HBM_SOURCES = "neuron_hbm_usage_sources"
# collector: counter samples left out, {reason: count} (over the sample cap, core without process)
META_HBM_DROPPED = "neuron_hbm_usage_dropped"
# read from a Neuron Explorer profile: what it held and what could not be used (docs/explorer.md)
META_EXPLORER = "neuron_explorer"

# -- names the analyses read in other producers' traces (torch, CUDA, ROCm, MTIA) ---------------
PROFILER_STEP_PREFIX = "ProfilerStep#"  # torch.profiler's step annotation: "ProfilerStep#12"
DATALOADER_PREFIX = "enumerate(DataLoader)#"  # "enumerate(DataLoader)#_...Iter.__next__"
DATALOADER_SUFFIX = ".__next__"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"
ATEN_PREFIX = "aten::"  # PyTorch's operator namespace
MODULE_PREFIX = "nn.Module: "  # torch.profiler's module frame: "nn.Module: Linear_0"
# ranges that 2021 Kineto recorded as ops ("Operator") and current torch as annotations
ANNOTATION_OP_PREFIXES = (
    DATALOADER_PREFIX,
    DATAPIPE_PREFIX,
    "Optimizer.",
    MODULE_PREFIX,
    "DataParallel.forward",
    "DistributedDataParallel.forward",
)
# host calls that block until the device has caught up (a drained queue behind them)
# Host syncs (docs/analysis.md#host_sync): a runtime wait blocks the host until device work is
# done, by itself; an op that may sync (``.item()``, ``nonzero``) is a sync only when it really
# waited: when a runtime wait or a device-to-host copy's launch lies inside it (``.item()`` of a
# host tensor does neither). Our runtime's waits are the ``host sync: ...`` rows.
HOST_WAIT_NAMES = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        # ROCm's blocking copies: c10's memcpy_and_sync issues hipMemcpyWithStream where CUDA
        # issues cudaMemcpyAsync + cudaStreamSynchronize (.cpu(), .item())
        "hipMemcpyWithStream",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        # Intel XPU (Kineto's xpu_runtime rows: Unified Runtime and Level Zero calls that block
        # the host until the device is done)
        "urQueueFinish",
        "urEventWait",
        "zeEventHostSynchronize",
        "zeCommandQueueSynchronize",
        "zeFenceHostSynchronize",
        "synchronize",
        "synchronizeStream",
        "synchronizeDevice",
    }
)
# aten ops that may block the host until the device is done: item / _local_scalar_dense and
# is_nonzero (``if tensor:``) read a value to the host; nonzero's output size depends on the
# data, so the host reads the count before it can allocate the result.
VALUE_READ_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"})
SYNC_OP_NAMES = VALUE_READ_OPS | {"aten::nonzero"}
# Record functions of the Python dispatch machinery (a device's tensor subclass or mode): what
# runs under them belongs to the aten op around them.
DISPATCH_FRAMES = frozenset({"PythonSubclass", "PythonDispatchMode"})
# Python frames (``with_stack``) of the emulated device's own code: like the dispatch frames, its
# internals, never what the host "was running" (the program's op around them is).
EMULATOR_FRAME_MARK = "neuron_profiler/emulator/"
HOST_SYNC_NAMES = HOST_WAIT_NAMES | SYNC_OP_NAMES
# the profiler's own work on the host (CUPTI buffer handling, the emulator's bookkeeping)
PROFILER_OVERHEAD_NAMES = frozenset({"Activity Buffer Request", "Profiler overhead"})


# Collective kinds, each with the letters that name it once case, spaces, "_" and "-" are
# gone (NCCL's AllGather, torch's all_gather_into_tensor, "CC: allgather", "all gather"),
# tested in this order.
COLLECTIVE_KINDS = (
    ("all_gather", "allgather"),
    ("reduce_scatter", "reducescatter"),
    ("all_reduce", "allreduce"),
    ("all_to_all", "alltoall"),
)


def collective_kind(text: str) -> str:
    """The kind of collective a name or ``Collective name`` arg says (``COLLECTIVE_KINDS``:
    all_gather, reduce_scatter, all_reduce, all_to_all), "" where it names none of them. The
    one rule of the communication report's kinds and the cost model's ring traffic."""
    flat = text.lower().replace(" ", "").replace("_", "").replace("-", "")
    return next((kind for kind, letters in COLLECTIVE_KINDS if letters in flat), "")


def hbm_process_name(device: int, instance: str) -> str:
    """The process of one Neuron device's memory counters (a Neuron Explorer profile)."""
    return f"Neuron device {int(device)} HBM" + (f" ({instance})" if instance else "")


def hbm_counter_name(hbm: int) -> str:
    return f"HBM {int(hbm)} in use (bytes)"


CORE_HBM_COUNTER_SUFFIX = " HBM in use (bytes)"


def core_hbm_counter_name(core: int) -> str:
    """The counter of one NeuronCore's device memory, on that core's process (the collector)."""
    return f"{core_process_name(core)}{CORE_HBM_COUNTER_SUFFIX}"


def is_core_hbm_counter_name(name: str) -> bool:
    return name.startswith(CORE_PROCESS_PREFIX) and name.endswith(CORE_HBM_COUNTER_SUFFIX)


# Usage categories (the counters' args keys). A source's own names are kept as it spells them
# (libnrt's ``usage_type``, Neuron Explorer's columns without "_bytes"); the emulator models these,
# named after the runtime's categories (docs/emulator.md "Runtime memory").
HBM_TENSORS = "tensors"  # the allocator's live buffers (emulator: measured, not modelled)
HBM_WEIGHTS = "weights"  # weights loaded with a compiled model (model constants)
HBM_MODEL_CODE = "model_code"
HBM_SCRATCHPAD = "scratchpad"
HBM_DMA_RINGS = "dma_rings"
HBM_COLLECTIVES = "collectives"
HBM_PROFILER = "profiler_buffers"
# Where each category's figures come from (META_HBM_SOURCES values)
HBM_FROM_ALLOCATOR = "allocator"  # counted buffer by buffer (emulator's tensors)
HBM_FROM_MODEL = "modelled"  # a modelled figure (docs/emulator.md), not measured
HBM_FROM_RUNTIME = "libnrt"  # reported by the real runtime (nrt_dma_mem_alloc/dealloc events)


def is_point_to_point(name: str) -> bool:
    """A send or a receive (``send``, ``CC: recv``, ``nccl:send``, ``c10d::recv_``, ``isend``):
    between two ranks, not a collective of its group; the cross-rank matching leaves it out.
    Not NCCL's ``SendRecv`` kernels: all_to_all runs on them too."""
    base = name[-_P2P_TAIL:].rsplit(":", 1)[-1].strip().strip("_").lower()  # (bounded work)
    return base in _POINT_TO_POINT


_POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "recv_any_source"})
_P2P_TAIL = 24  # characters that can hold a point-to-point name after its prefix
