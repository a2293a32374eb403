"""Tie device activities to the host ops that launched them, when the source has no correlation id.

    acts = link_by_containment(acts, op_tid, op_start_ns, op_end_ns, op_correlation)

The real runtime does not know torch.profiler's correlation ids, but its host runtime calls
(``nrt_execute``, ``nrt_model_submit``...) run on the launching thread inside the aten op that
issued them, and the device work they start shares their ``exec_id`` (or ``nrta_seq_id``). So:

1. a host-side row (runtime call, host sync, fallback) gets the correlation id of the innermost
   host op on the same thread whose ``[start, end]`` contains the row's start (ties: the shorter
   op); innermost means the containing op that started last;
2. device work inherits the id of its runtime call (``match_runtime_calls``: first-in-first-out
   per key and queue).

Rows that already carry a nonzero correlation id (the emulator stamps them) are left alone; rows
nothing contains stay 0. Everything is sorts and binary searches over numpy columns.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue


def _count_le(
    groups: list[np.ndarray], key: np.ndarray, groups_q: list[np.ndarray], key_q: np.ndarray
) -> np.ndarray:
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


def innermost_containing(
    op_tid: np.ndarray,
    op_start_ns: np.ndarray,
    op_end_ns: np.ndarray,
    q_tid: np.ndarray,
    q_ns: np.ndarray,
) -> np.ndarray:
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
    """For each row, the row of the host runtime call that launched it (-1: none, or itself a
    host-side row).

    Calls and the work they launched pair first-in-first-out: the k-th execution on a queue with
    a given key belongs to the k-th call with that key (both in start order). The key is
    (core, ``nrta_seq_id``) where both sides carry one, else (core, ``exec_id``). A repeated
    ``exec_id`` therefore never sends two executions to one call, and a backed-up queue cannot
    make a later call claim an earlier call's work."""
    out = np.full(len(acts), -1, dtype=np.int64)
    calls = np.flatnonzero(acts.kind == ActivityKind.RUNTIME_CALL)
    work = np.flatnonzero(acts.queue != Queue.HOST)
    if len(calls) == 0 or len(work) == 0:
        return out
    core = acts.core.astype(np.int64) << 44
    mask = (1 << 44) - 1
    by_seq = work[acts.seq_id[work] >= 0]
    seq_calls = calls[acts.seq_id[calls] >= 0]
    if len(by_seq) and len(seq_calls):
        key = core | (acts.seq_id & mask)
        out[by_seq] = _fifo(seq_calls, key[seq_calls], by_seq, key[by_seq], acts)
    rest = work[(out[work] < 0) & (acts.exec_id[work] >= 0)]
    exec_calls = calls[acts.exec_id[calls] >= 0]
    if len(rest) and len(exec_calls):
        key = core | (acts.exec_id & mask)
        out[rest] = _fifo(exec_calls, key[exec_calls], rest, key[rest], acts)
    # Copies the runtime records as host spans carry no id: the call around them on their thread.
    copies = work[
        (out[work] < 0)
        & (acts.kind[work] == ActivityKind.DMA)
        & (acts.exec_id[work] < 0)
        & (acts.seq_id[work] < 0)
    ]
    if len(copies):
        at = innermost_containing(
            acts.thread_id[calls],
            acts.start_ns[calls],
            acts.end_ns[calls],
            acts.thread_id[copies],
            acts.start_ns[copies],
        )
        out[copies] = np.where(at >= 0, calls[np.clip(at, 0, None)], -1)
    return out


def with_stage_exec_ids(acts: DeviceActivities) -> DeviceActivities:
    """Runtime calls without an ``exec_id`` take the one of the first host execution stage
    (``kbl_exec_*``) inside them on their thread: the real runtime writes ``exec_id`` only on
    those stages (``nrt_execute`` and ``nrt_model_submit`` carry ``model_id`` alone)."""
    calls = np.flatnonzero((acts.kind == ActivityKind.RUNTIME_CALL) & (acts.exec_id < 0))
    stages = np.flatnonzero((acts.kind == ActivityKind.EXEC_STAGE) & (acts.exec_id >= 0))
    if len(calls) == 0 or len(stages) == 0:
        return acts
    at = innermost_containing(
        acts.thread_id[calls],
        acts.start_ns[calls],
        acts.end_ns[calls],
        acts.thread_id[stages],
        acts.start_ns[stages],
    )
    hit = np.flatnonzero(at >= 0)
    if len(hit) == 0:
        return acts
    latest_first = hit[np.argsort(-acts.start_ns[stages[hit]], kind="stable")]
    exec_id = acts.exec_id.copy()
    exec_id[calls[at[latest_first]]] = acts.exec_id[stages[latest_first]]  # the first one wins
    return dataclasses.replace(acts, exec_id=exec_id)


def _fifo(
    calls: np.ndarray,
    call_key: np.ndarray,
    work: np.ndarray,
    work_key: np.ndarray,
    acts: DeviceActivities,
) -> np.ndarray:
    """The call paired with each work row: calls ranked by start within their key, work ranked
    by start within (key, queue); equal ranks pair (-1 where the key has too few calls)."""
    order = np.lexsort((calls, acts.start_ns[calls], call_key))
    sorted_keys, sorted_calls = call_key[order], calls[order]
    w_order = np.lexsort((work, acts.start_ns[work], acts.queue[work], work_key))
    w_key, w_queue = work_key[w_order], acts.queue[work][w_order]
    new_group = np.ones(len(w_order), dtype=bool)
    new_group[1:] = (w_key[1:] != w_key[:-1]) | (w_queue[1:] != w_queue[:-1])
    positions = np.arange(len(w_order))
    rank = positions - np.maximum.accumulate(np.where(new_group, positions, 0))
    pos = np.searchsorted(sorted_keys, w_key, side="left") + rank
    ok = pos < len(sorted_keys)
    ok[ok] = sorted_keys[pos[ok]] == w_key[ok]
    out = np.full(len(work), -1, dtype=np.int64)
    out[w_order[ok]] = sorted_calls[pos[ok]]
    return out


def link_by_containment(
    acts: DeviceActivities,
    op_tid: np.ndarray,
    op_start_ns: np.ndarray,
    op_end_ns: np.ndarray,
    op_correlation: np.ndarray,
) -> DeviceActivities:
    """Fill correlation ids that are 0 (see the module docstring); returns a new object."""
    corr = acts.correlation_id.copy()
    op_tid = np.asarray(op_tid, dtype=np.int64)
    op_start = np.asarray(op_start_ns, dtype=np.int64)
    op_end = np.asarray(op_end_ns, dtype=np.int64)
    op_corr = np.asarray(op_correlation, dtype=np.int64)
    host = np.flatnonzero((acts.queue == Queue.HOST) & (corr == 0))
    if len(host):
        op = innermost_containing(
            op_tid, op_start, op_end, acts.thread_id[host], acts.start_ns[host]
        )
        corr[host] = np.where(op >= 0, op_corr[np.clip(op, 0, None)] if len(op_corr) else 0, 0)
    caller = match_runtime_calls(acts)
    inherit = np.flatnonzero((acts.correlation_id == 0) & (caller >= 0))
    corr[inherit] = corr[caller[inherit]]
    return dataclasses.replace(acts, correlation_id=corr)
