"""``framework_stream_id``: the framework thread that launched a runtime event.

    ops = ThreadOps.of_framework(events, fw_rows, fw_correlation)   # or .of_host(HostOps)
    corr, counts = link_by_stream(events, rows, host_side, corr, ops, framework=...)

AWS documents the column (schema 7.4.0) as the thread id of the framework's driver event, which
Explorer copies onto the runtime events it joins to that event by nrt sequence id. A runtime
call can run on a runtime worker thread, away from the op that issued it; the stream names the
op's thread. So a host-side runtime event that no flow id linked takes the innermost op of THAT
thread whose span holds its start (the containment rule the libnrt path applies on a call's own
thread, ``linking.innermost_containing``); what this cannot link falls through to containment
on its own thread, in placement, as before.

Threads are keyed by (instance, process, thread) among the profile's framework events (AWS:
process and thread ids repeat across instances), and by (process, thread) among a host trace's
ops (torch.profiler names no instance): a profile's pid and tid name the host trace's thread of
equal pid and tid. Every value that cannot be used is counted (``StreamCounts``), never fatal.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from neuron_profiler.explorer.columns import EventColumns
from neuron_profiler.runtime_trace.linking import innermost_containing
from neuron_profiler.runtime_trace.placement import HostOps

NO_INSTANCE = -1  # a host trace's ops: torch.profiler names no instance
_MAX_DIGITS = 18  # a thread id that fits int64


@dataclass(frozen=True)
class ThreadOps:
    """Ops a stream can name, per op its thread key, span and External id.

    Args:
        instance: the instance code of each op (``NO_INSTANCE`` for a host trace's ops, whose
            threads are then matched on process and thread alone).
    """

    instance: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    correlation: np.ndarray

    @classmethod
    def of_framework(cls, ev: EventColumns, fw: np.ndarray, correlation: np.ndarray) -> ThreadOps:
        """The profile's framework events (``fw``: their rows) with their External ids."""
        start = ev.start_ns[fw]
        return cls(
            ev.instance_code[fw],
            ev.process_id[fw],
            ev.thread_id[fw],
            start,
            np.maximum(ev.end_ns[fw], start),
            np.asarray(correlation, dtype=np.int64),
        )

    @classmethod
    def of_host(cls, ops: HostOps) -> ThreadOps:
        """A host trace's ops (``HostOps.from_trace``: each op's pid is known)."""
        if ops.pid is None:
            raise ValueError("host ops without process ids cannot be matched to a stream")
        return cls(
            np.full(len(ops.tid), NO_INSTANCE, dtype=np.int64),
            ops.pid,
            ops.tid,
            ops.start_ns,
            ops.end_ns,
            ops.correlation,
        )

    @classmethod
    def joined(cls, *parts: ThreadOps) -> ThreadOps:
        """The ops of ``parts``, one after another."""
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))

    @property
    def by_instance(self) -> bool:
        return bool(len(self.instance)) and bool((self.instance != NO_INSTANCE).all())


@dataclass(frozen=True)
class StreamCounts:
    """What became of the stream ids (the ``neuron_explorer`` metadata keys, prefixed).

    Args:
        linked: runtime events linked through their stream's thread.
        not_an_integer: events whose value is not a thread id (not a non-negative integer).
        unknown_thread: linkable events whose stream names no framework thread of the profile
            (nor, merged, a thread of the host trace).
        not_in_host_trace: merged: the profile's framework thread has no op on the host trace's
            thread of the same pid and tid.
        no_op_around: the thread is known, but none of its ops holds the event's start.
    """

    linked: int = 0
    not_an_integer: int = 0
    unknown_thread: int = 0
    not_in_host_trace: int = 0
    no_op_around: int = 0

    def as_metadata(self) -> dict[str, int]:
        return {f"framework_stream_{f.name}": int(getattr(self, f.name)) for f in fields(self)}


def stream_threads(ev: EventColumns) -> tuple[np.ndarray, int]:
    """Per event the thread id its ``framework_stream_id`` names (-1: absent or not a thread
    id), and how many values were not a thread id. Parsed once per distinct value."""
    parsed = np.array([_thread_id(s) for s in ev.streams], dtype=np.int64)
    bad_value = np.array([s != "" and t < 0 for s, t in zip(ev.streams, parsed, strict=True)])
    tid = parsed[ev.stream_code] if len(ev.stream_code) else np.zeros(0, dtype=np.int64)
    bad = int(bad_value[ev.stream_code].sum()) if len(ev.stream_code) else 0
    return tid, bad


def _thread_id(text: str) -> int:
    ok = text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS
    return int(text) if ok else -1


def link_by_stream(
    ev: EventColumns,
    rows: np.ndarray,
    host_side: np.ndarray,
    corr: np.ndarray,
    ops: ThreadOps,
    framework: ThreadOps,
) -> tuple[np.ndarray, StreamCounts]:
    """``corr`` (one per activity, ``rows`` its events) with each host-side activity that has no
    id yet and names a stream linked to the innermost op of ``ops`` on that thread holding its
    start; ``framework``: the profile's own framework threads (what a stream may name)."""
    stream, bad = stream_threads(ev)
    want = np.flatnonzero(host_side & (corr == 0) & (stream[rows] >= 0))
    if not len(want):
        return corr, StreamCounts(not_an_integer=bad)
    at = rows[want]
    inst, pid, tid = ev.instance_code[at], ev.process_id[at], stream[at]
    in_profile = _isin_threads((inst, pid, tid), framework)
    q_inst = inst if ops.by_instance else np.full(len(at), NO_INSTANCE, dtype=np.int64)
    op_key, q_key = _thread_codes(
        (ops.instance, ops.pid, ops.tid), (q_inst, pid, tid), same=ops.by_instance
    )
    known = np.isin(q_key, op_key)
    op = innermost_containing(op_key, ops.start_ns, ops.end_ns, q_key, ev.start_ns[at])
    hit = op >= 0
    out = corr.copy()
    out[want[hit]] = ops.correlation[op[hit]]
    counts = StreamCounts(
        linked=int(hit.sum()),
        not_an_integer=bad,
        unknown_thread=int((~known & ~in_profile).sum()),
        not_in_host_trace=int((~known & in_profile).sum()),
        no_op_around=int((known & ~hit).sum()),
    )
    return out, counts


def _isin_threads(keys: tuple[np.ndarray, ...], ops: ThreadOps) -> np.ndarray:
    op_key, q_key = _thread_codes((ops.instance, ops.pid, ops.tid), keys, same=True)
    return np.isin(q_key, op_key)


def _thread_codes(
    a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], *, same: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One integer per (instance, pid, tid) across both sides, equal where the threads are
    (``same``: the instance counts; else only pid and tid)."""
    cols = a if same else a[1:]
    q_cols = b if same else b[1:]
    both = np.stack([np.concatenate([x, y]) for x, y in zip(cols, q_cols, strict=True)])
    if not both.shape[1]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    code = np.unique(both, axis=1, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return code[: len(a[0])], code[len(a[0]) :]
