"""What a Neuron Explorer profile holds, as numpy columns: the one layout the Parquet reader
(``reader``) and the legacy JSON reader (``legacy``) both fill and the converters
(``activities``, ``profile_trace``) read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class EventColumns:
    """SystemProfileEvents as columns, one entry per event (file order).

    Args:
        start_ns / end_ns: the event's span. source: index into ``schema.SOURCES`` (3: other).
        name_code -> names, instance_code -> instances: interned strings.
        process_id, thread_id, nc_idx, pcore_idx, worker_gid: -1 where absent.
        flow_row / flow_value: one entry per (event, flow id) the events carry.
        exec_id / seq_id / op_id: from each event's extra attributes (-1 absent).
        attributes: each event's extra attributes as a JSON object (bytes; ``{}`` when none).
        stream_code -> streams: framework_stream_id ("" absent).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    source: np.ndarray
    name_code: np.ndarray
    names: list[str]
    instance_code: np.ndarray
    instances: list[str]
    process_id: np.ndarray
    thread_id: np.ndarray
    nc_idx: np.ndarray
    pcore_idx: np.ndarray
    worker_gid: np.ndarray
    flow_row: np.ndarray
    flow_value: np.ndarray
    exec_id: np.ndarray
    seq_id: np.ndarray
    op_id: np.ndarray
    attributes: list[bytes]
    stream_code: np.ndarray
    streams: list[str]

    def __len__(self) -> int:
        return len(self.start_ns)


@dataclass(frozen=True)
class HbmColumns:
    """SystemProfileHbmUsage: one sample per row; ``categories`` maps each usage column (e.g.
    ``weights_bytes``) to its values, which the profile says add up to ``total``."""

    timestamp: np.ndarray
    total: np.ndarray
    device_idx: np.ndarray
    hbm_idx: np.ndarray
    instance_code: np.ndarray
    instances: list[str]
    categories: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.timestamp)


@dataclass(frozen=True)
class CcOpColumns:
    """CcOp: per collective operation its id, name, algorithm and sizes (-1 absent)."""

    op_id: np.ndarray
    start_ns: np.ndarray
    operation: list[str]  # per row
    algorithm: list[str]  # per row ("" absent)
    input_size: np.ndarray
    output_size: np.ndarray

    def __len__(self) -> int:
        return len(self.op_id)


@dataclass(frozen=True)
class ExplorerProfile:
    """What one profile holds; tables it does not have are empty / None.

    Args:
        dma_packets / dma_bytes: DmaPacket's rows and their transfer bytes, by queue type.
        summary: Summary's first row (scalar columns only). files: every file read.
        malformed: odd values counted (never fatal). legacy: read from the JSON export.
        null_required: per required column of the events, how many events have no value in it
            (each such event is counted once in ``malformed``; its value reads as absent).
    """

    source: str
    events: EventColumns
    hbm: HbmColumns | None = None
    cc_ops: CcOpColumns | None = None
    dma_packets: dict[str, int] = field(default_factory=dict)
    dma_bytes: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    malformed: int = 0
    legacy: bool = False
    null_required: dict[str, int] = field(default_factory=dict)


def key_codes(*cols: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """One code per distinct tuple of ``cols`` (equal-length integer columns), numbered in the
    tuples' sorted order, and the distinct tuples' columns: ``np.unique(np.stack(cols), axis=1,
    return_inverse=True)`` by 1-D uniques, many times faster on a million rows."""
    code = np.zeros(len(cols[0]), dtype=np.int64)
    firsts: list[np.ndarray] = []
    for col in cols:
        values, inverse = np.unique(col, return_inverse=True)
        pair = code * len(values) + inverse.reshape(-1)  # < rows**2: fits int64
        keys, code = np.unique(pair, return_inverse=True)
        code = code.reshape(-1)
        firsts = [f[keys // len(values)] for f in firsts] + [values[keys % len(values)]]
    return code, firsts
