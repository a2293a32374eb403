"""Column names and event kinds of the one trace model (see ``model.py``).

Times are integer nanoseconds on the Unix-epoch clock torch.profiler uses; the unit is in the name.
"""

from __future__ import annotations

import enum

import numpy as np

# Event table columns (all numpy arrays of equal length, one row per trace event).
TS_NS = "ts_ns"  # int64, absolute Unix-epoch ns
DUR_NS = "dur_ns"  # int64, 0 for instants / counters / flow endpoints
PH = "ph"  # uint8, Phase code
KIND = "kind"  # uint8, EventKind code (derived from category, vendor-neutral)
NAME_ID = "name_id"  # int32 index into Trace.strings
CAT_ID = "cat_id"  # int32 index into Trace.strings
PID = "pid"  # int64 (string pids are interned: see Trace.pid_labels)
TID = "tid"  # int64 (string tids are interned: see Trace.tid_labels)
EXTERNAL_ID = "external_id"  # int64, args["External id"] (or 2021's "external id"), -1 if absent
CORRELATION = "correlation"  # int64, args["correlation"], -1 if absent
STREAM = "stream"  # int64, python_int(args["stream"]) (Python's int(), HTA's rule), -1 if absent
# or not a number: the device queue of kernels and copies, read by every device analysis
FLOW_ID = "flow_id"  # int64, "id" of s/t/f flows and of other phases (async b/n/e), else -1
ARGS_ROW = "args_row"  # int64 index into Trace.raw_args, -1 if the event has no args
FORM = "form"  # uint8, how the event was spelled in Chrome JSON (Form bits), 0 = Kineto's way

EVENT_COLUMNS = (
    TS_NS,
    DUR_NS,
    PH,
    KIND,
    NAME_ID,
    CAT_ID,
    PID,
    TID,
    EXTERNAL_ID,
    CORRELATION,
    STREAM,
    FLOW_ID,
    ARGS_ROW,
    FORM,
)
COLUMN_DTYPES = {
    PH: np.uint8,
    KIND: np.uint8,
    NAME_ID: np.int32,
    CAT_ID: np.int32,
    FORM: np.uint8,
}  # every other column is int64
COLUMN_FILL = {EXTERNAL_ID: -1, CORRELATION: -1, STREAM: -1, FLOW_ID: -1, ARGS_ROW: -1}  # others: 0


def python_int(value: object, default: int = -1) -> int:
    """Python's ``int(value)`` where it takes the value and the result fits int64, else
    ``default`` (None, "0x1f", NaN, 1e30, objects): HTA's rule for ``args["stream"]``, the one
    rule every producer of the STREAM column follows."""
    if value is None:
        return default
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return default
    return number if -(2**63) <= number < 2**63 else default


def default_column(name: str, rows: int) -> np.ndarray:
    """A column of ``rows`` "nothing here" values (-1 ids, 0 otherwise): lets producers that
    predate a column still build a ``Trace``."""
    return np.full(rows, COLUMN_FILL.get(name, 0), dtype=COLUMN_DTYPES.get(name, np.int64))


class Form:
    """Bits of the FORM column: Chrome-format details no analysis needs but a lossless export
    writes back. 0 is how Kineto writes an event; the low 5 bits mean something per phase."""

    DETAIL = 0x1F
    SCOPE = 0x03  # INSTANT: index into SCOPES ("s" absent, "g", "p", "t")
    CAPITAL_I = 0x04  # INSTANT: written as ph "I"
    BP_FLIPPED = 0x01  # flows: no "bp":"e" on an f, or "bp":"e" on an s / t (Kineto: f only)
    # OTHER: DETAIL is the index of the letter in OTHER_PHASES
    NO_CAT = 0x20  # no "cat" key (the event's cat_id then names "")
    PID_TEXT = 0x40  # pid written as a decimal string ("25738"), read as the number
    TID_TEXT = 0x80


SCOPES = ("", "g", "p", "t")
# Trace.id_labels text of an async event's "id2" ({"local": "0x2"} or {"global": ...}, the
# spec's process-local and global ids), read when it has no "id": this prefix, then its JSON
ID2_LABEL = "\x00id2:"


def integer_label(label: str) -> bool:
    """Whether an ``id_labels`` text is an integer's canonical decimal spelling: the label of
    an id the ``flow_id`` column cannot hold as itself (``-1``, which there means none; ``2**64
    - 1``, beyond int64), written back as that number."""
    try:
        return str(int(label)) == label
    except ValueError:
        return False


def id2_scope(label: str) -> str | None:
    """ "local" / "global" for an ``id_labels`` text made from an ``id2`` object, else None."""
    if not label.startswith(ID2_LABEL):
        return None
    return "local" if label.startswith(ID2_LABEL + '{"local"') else "global"


# Trace Event Format phases the model keeps as Phase.OTHER; index 0: a letter outside the format
# (written back as "?")
OTHER_PHASES = (
    "?",
    "b",
    "n",
    "e",
    "S",
    "T",
    "p",
    "F",
    "P",
    "N",
    "O",
    "D",
    "R",
    "c",
    "(",
    ")",
    "V",
    "v",
)


class Phase(enum.IntEnum):
    """Chrome trace ``ph`` values the model keeps (metadata ``M`` events go to Trace.metadata)."""

    COMPLETE = 1  # X
    INSTANT = 2  # i / I
    COUNTER = 3  # C
    FLOW_START = 4  # s
    FLOW_STEP = 5  # t
    FLOW_END = 6  # f
    BEGIN = 7  # B (paired into COMPLETE by the loader when possible)
    END = 8  # E
    OTHER = 9  # anything else (kept, never dropped)


PH_CODES = {
    "X": Phase.COMPLETE,
    "i": Phase.INSTANT,
    "I": Phase.INSTANT,
    "C": Phase.COUNTER,
    "s": Phase.FLOW_START,
    "t": Phase.FLOW_STEP,
    "f": Phase.FLOW_END,
    "B": Phase.BEGIN,
    "E": Phase.END,
}
PH_LETTERS = {
    Phase.COMPLETE: "X",
    Phase.INSTANT: "i",
    Phase.COUNTER: "C",
    Phase.FLOW_START: "s",
    Phase.FLOW_STEP: "t",
    Phase.FLOW_END: "f",
    Phase.BEGIN: "B",
    Phase.END: "E",
}


class EventKind(enum.IntEnum):
    """What an event is, independent of vendor category spelling (CUDA, ROCm, MTIA, neuron, 2021)."""

    OTHER = 0
    CPU_OP = 1  # cpu_op / Operator
    USER_ANNOTATION = 2  # user_annotation (ProfilerStep#N, record_function)
    GPU_USER_ANNOTATION = 3  # gpu_user_annotation (record_function projected on a device stream)
    RUNTIME = 4  # cuda_runtime / cuda_driver / Runtime / mtia_runtime / privateuse1_runtime
    KERNEL = 5  # kernel / Kernel / mtia_ccp_events (device compute)
    MEMCPY = 6  # gpu_memcpy / Memcpy (incl. DMA transfers)
    MEMSET = 7  # gpu_memset / Memset
    COLLECTIVE = 8  # device-side collective (NCCL kernels, neuron collectives)
    PYTHON = 9  # python_function
    FLOW = 10  # ac2g / async / async_cpu_to_gpu / fwdbwd flows
    TRACE_META = 11  # Trace, Iteration-level markers
    CPU_INSTANT = 12  # cpu_instant_event
    FALLBACK = 13  # CPU-fallback op (neuron_profiler extension)
    DATALOADER = 14  # dataloader annotations


# Device work: what keeps a device busy (kernels, copies, memsets, collectives). Every analysis
# of busy and idle time reads these kinds; the exporters also put GPU user annotations (ranges
# projected on a device stream, never work) on the device's tracks.
WORK_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE)
DEVICE_KINDS = frozenset({*WORK_KINDS, EventKind.GPU_USER_ANNOTATION})
