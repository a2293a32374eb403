"""Tie device activities to the host ops that launched them, when the source has no correlation id.

    acts = link_by_containment(acts, op_tid, op_start_ns, op_end_ns, op_correlation)

The real runtime does not know torch.profiler's correlation ids, but its host runtime calls
(``nrt_execute``, ``nrt_model_submit``...) run on the launching thread inside the aten op that
issued them, and the device work they start shares their ``exec_id`` (or ``nrta_seq_id``). So:

1. a host-side row (runtime call, host sync, fallback) gets the correlation id of the innermost
   host op on the same thread whose ``[start, end]`` contains the row's start (ties: the shorter
   op); innermost means the containing op that started last;
2. device work inherits the id of its runtime call (``match_runtime_calls``).

Rows that already carry a nonzero correlation id (the emulator stamps them) are left alone; rows
nothing contains stay 0. Everything is sorts and binary searches over numpy columns.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue


def _count_le(groups: list[np.ndarray], key: np.ndarray, groups_q: list[np.ndarray],
              key_q: np.ndarray) -> np.ndarray:
    """For each query, how many elements are <= it in (groups..., key) order: ``searchsorted``
    (side='right') on composite keys, done as one merge sort of elements and queries."""
    n, m = len(key), len(key_q)
    cols = [np.concatenate([a, b]) for a, b in zip(groups, groups_q, strict=True)]
    is_query = np.concatenate([np.zeros(n, np.int8), np.ones(m, np.int8)])
    order = np.lexsort((is_query, np.concatenate([key, key_q]), *reversed(cols)))
    elements_so_far = np.cumsum(order < n)
    out = np.empty(m, dtype=np.int64)
    queries = order >= n
    out[order[queries] - n] = elements_so_far[queries]
    return out


def _last_at_or_before(groups: list[np.ndarray], key: np.ndarray, groups_q: list[np.ndarray],
                       key_q: np.ndarray) -> np.ndarray:
    """For each query, the index of the element of its group with the largest key <= the query's
    (-1 when none). Ties on key: the element that comes last in the input."""
    if len(key) == 0:
        return np.full(len(key_q), -1, dtype=np.int64)
    order = np.lexsort((np.arange(len(key)), key, *reversed(groups)))
    sorted_groups = [g[order] for g in groups]
    pos = _count_le(sorted_groups, key[order], groups_q, key_q) - 1
    safe = np.clip(pos, 0, None)
    ok = pos >= 0
    for g, gq in zip(sorted_groups, groups_q, strict=True):
        ok &= g[safe] == gq
    return np.where(ok, order[safe], -1)


def _innermost_containing(op_tid: np.ndarray, op_start_ns: np.ndarray, op_end_ns: np.ndarray,
                          q_tid: np.ndarray, q_ns: np.ndarray) -> np.ndarray:
    """Index of the innermost op on the query's thread with start <= q <= end, else -1.

    Ops sorted by (thread, start, -end): the answer is the last op at or before the query's
    position whose end >= q. A sparse table of running maxima of ``end`` finds it by binary
    lifting for all queries at once (O((n + q) log n)).
    """
    n = len(op_start_ns)
    if n == 0 or len(q_ns) == 0:
        return np.full(len(q_ns), -1, dtype=np.int64)
    order = np.lexsort((-op_end_ns, op_start_ns, op_tid))
    tid, start, end = op_tid[order], op_start_ns[order], op_end_ns[order]
    cur = _count_le([tid], start, [q_tid], q_ns) - 1  # last op on the thread started <= q
    first = np.searchsorted(tid, q_tid, side="left")  # the thread's first op
    levels = [end]  # levels[L][i] = max(end[i - 2**L + 1 .. i])
    while (1 << len(levels)) <= n:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        nxt = prev.copy()
        nxt[half:] = np.maximum(prev[half:], prev[:-half])
        levels.append(nxt)
    for level in range(len(levels) - 1, -1, -1):
        step = 1 << level
        can = cur - step + 1 >= 0
        block_max = levels[level][np.clip(cur, 0, None)]
        skip = can & (block_max < q_ns)
        cur = np.where(skip, cur - step, cur)
    # cur: the largest index <= the start position with end >= q (or the thread had none).
    found = (cur >= first) & (cur >= 0)
    safe = np.clip(cur, 0, n - 1)
    found &= (tid[safe] == q_tid) & (end[safe] >= q_ns) & (start[safe] <= q_ns)
    return np.where(found, order[safe], -1)


def match_runtime_calls(acts: DeviceActivities) -> np.ndarray:
    """For each row, the row of the host runtime call that launched it (-1: none or itself a
    host-side row). Keyed by ``nrta_seq_id`` when both have one, else by (core, ``exec_id``);
    with repeated keys, the latest call that started at or before the work (else the first)."""
    out = np.full(len(acts), -1, dtype=np.int64)
    calls = np.flatnonzero(acts.kind == ActivityKind.RUNTIME_CALL)
    work = np.flatnonzero(acts.queue != Queue.HOST)
    if len(calls) == 0 or len(work) == 0:
        return out
    by_seq = work[acts.seq_id[work] >= 0]
    seq_calls = calls[acts.seq_id[calls] >= 0]
    if len(by_seq) and len(seq_calls):
        out[by_seq] = _match(seq_calls, [acts.seq_id[seq_calls]], by_seq, [acts.seq_id[by_seq]],
                             acts.start_ns)
    rest = work[(out[work] < 0) & (acts.exec_id[work] >= 0)]
    exec_calls = calls[acts.exec_id[calls] >= 0]
    if len(rest) and len(exec_calls):
        key = lambda rows: [acts.core[rows], acts.exec_id[rows]]  # noqa: E731
        out[rest] = _match(exec_calls, key(exec_calls), rest, key(rest), acts.start_ns)
    return out


def _match(calls: np.ndarray, call_key: list[np.ndarray], rows: np.ndarray,
           row_key: list[np.ndarray], start_ns: np.ndarray) -> np.ndarray:
    """Latest call of the same key started at or before each row, else the key's first call."""
    hit = _last_at_or_before(call_key, start_ns[calls], row_key, start_ns[rows])
    missing = hit < 0
    if missing.any():  # work stamped before its call (clock skew): take the key's first call
        early = _last_at_or_before(call_key, -start_ns[calls], [k[missing] for k in row_key],
                                   np.full(int(missing.sum()), np.iinfo(np.int64).max))
        hit[missing] = early
    return np.where(hit >= 0, calls[np.clip(hit, 0, None)], -1)


def link_by_containment(acts: DeviceActivities, op_tid: np.ndarray, op_start_ns: np.ndarray,
                        op_end_ns: np.ndarray, op_correlation: np.ndarray) -> DeviceActivities:
    """Fill correlation ids that are 0 (see the module docstring); returns a new object."""
    corr = acts.correlation_id.copy()
    op_tid = np.asarray(op_tid, dtype=np.int64)
    op_start = np.asarray(op_start_ns, dtype=np.int64)
    op_end = np.asarray(op_end_ns, dtype=np.int64)
    op_corr = np.asarray(op_correlation, dtype=np.int64)
    host = np.flatnonzero((acts.queue == Queue.HOST) & (corr == 0))
    if len(host):
        op = _innermost_containing(op_tid, op_start, op_end, acts.thread_id[host],
                                   acts.start_ns[host])
        corr[host] = np.where(op >= 0, op_corr[np.clip(op, 0, None)] if len(op_corr) else 0, 0)
    caller = match_runtime_calls(acts)
    inherit = np.flatnonzero((acts.correlation_id == 0) & (caller >= 0))
    corr[inherit] = corr[caller[inherit]]
    return dataclasses.replace(acts, correlation_id=corr)
