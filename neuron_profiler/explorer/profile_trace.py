"""A Neuron Explorer profile as a torch.profiler trace: on its own, or placed on a host trace.

    result = profile_trace(read_profile("profile/"))               # export: no host trace
    result = merge_profile(load_trace("host.pt.trace.json"), read_profile("profile/"))
    write_trace(result.trace, "out.pftrace")

Both go through ``runtime_trace.merge.merge_activities``, i.e. the one placement the libnrt path
uses: a process per NeuronCore (per instance, process and ``nc_idx``; named after all three and
the worker), a thread per queue, runtime calls on their host thread, every event a slice with
its exact span. On its own, the profile's framework events become the host ops (``cpu_op``,
External ids 1, 2, ... in start order); on a host trace, the host trace's ops are used and each
framework event stands for the op around its start on its thread; a runtime event's
``framework_stream_id`` names the host trace's thread of equal pid and tid (``streams``); of a
profile with several instances only one is the host trace's, the others' host processes are
placed as on their own (``merge_profile``). Then, added here:
- an ``ac2g`` arrow from the op to each event that shares its flow id;
- HBM usage: per Neuron device (and instance) a process of counters, one per HBM, whose series
  are the usage categories (their values add up to ``total_bytes``; samples where they do not
  are counted);
- metadata ``neuron_explorer``: files read, counts of what was used and what could not be.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.explorer import schema as X
from neuron_profiler.explorer.activities import (
    Converted,
    CoreKey,
    framework_rows,
    to_activities,
)
from neuron_profiler.explorer.columns import EventColumns, ExplorerProfile, HbmColumns
from neuron_profiler.explorer.hosts import HostIds
from neuron_profiler.explorer.streams import ThreadOps
from neuron_profiler.runtime_trace.activities import ActivityKind
from neuron_profiler.runtime_trace.linking import innermost_containing
from neuron_profiler.runtime_trace.merge import MergeResult, host_pid_lookup, merge_activities
from neuron_profiler.runtime_trace.placement import HostOps
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import Trace, appended_rows

FIRST_EXTERNAL_ID = 1  # External ids given to a profile's framework events (no host trace)


@dataclass(frozen=True)
class ExplorerResult:
    """The trace and what went into it (``merge``: the placement's counts)."""

    trace: Trace
    merge: MergeResult
    converted: Converted
    framework_events: int
    arrows: int
    hbm_samples: int
    hbm_mismatched: int


def profile_trace(profile: ExplorerProfile) -> ExplorerResult:
    """The profile on its own: its framework events are the host ops; each (instance, pid) is
    a host process of its own (``hosts``), so nothing of two processes is merged. The trace
    has the real thread ids; ``merge.placed`` and ``converted`` the placing ones (equal unless
    two host processes share a thread id)."""
    ev = profile.events
    fw = framework_rows(ev)
    corr = np.arange(FIRST_EXTERNAL_ID, FIRST_EXTERNAL_ID + len(fw), dtype=np.int64)
    hosts = HostIds.of(ev)
    host = _framework_trace(profile, fw, corr, hosts)
    conv = to_activities(profile, corr, thread_id=hosts.tid)
    merged = merge_activities(host, conv.acts, [profile.source], host_pid=hosts.host_pid)
    starts = (hosts.pid[fw], hosts.tid[fw], ev.start_ns[fw])
    result = _finish(profile, merged, conv, fw, starts, superseded=0, hosts=hosts)
    trace = hosts.real_threads(result.trace)
    return dataclasses.replace(result, trace=trace)


def merge_profile(host: Trace, profile: ExplorerProfile) -> ExplorerResult:
    """The profile placed on ``host``: framework events link through the host op around them.

    ``host`` is one process's torch.profiler trace, which names no instance; of a profile with
    several instances, the one whose framework events ``host``'s ops hold is ``host``'s
    (``_host_instance``), and the others' host processes are placed as exported alone
    (``_merge_apart``), so no thread holds two instances' events."""
    ev = profile.events
    fw = framework_rows(ev)
    ops = HostOps.from_trace(host)
    at = innermost_containing(ops.tid, ops.start_ns, ops.end_ns, ev.thread_id[fw], ev.start_ns[fw])
    mine = _host_instance(ev, fw, at >= 0)
    if mine is not None:
        return _merge_apart(host, profile, fw, ops, at, mine)
    found = at >= 0
    safe = np.clip(at, 0, None)
    corr = np.where(found, ops.correlation[safe] if len(ops.correlation) else 0, 0)
    conv = to_activities(profile, corr.astype(np.int64), ThreadOps.of_host(ops))
    merged = merge_activities(host, conv.acts, [profile.source], host_ops=ops)
    tid = ev.thread_id[fw]
    pid = np.asarray(host_pid_lookup(host)(tid), dtype=np.int64)
    op_start = np.where(found, ops.start_ns[safe] if len(ops.start_ns) else 0, -1)
    return _finish(profile, merged, conv, fw, (pid, tid, op_start), superseded=len(fw))


def _host_instance(ev: EventColumns, fw: np.ndarray, in_op: np.ndarray) -> int | None:
    """Of a profile with several instances, the code of the one the host trace is: the most
    of whose framework events a host op holds (``in_op``), the first by name on a tie or
    where none is held; None for a profile of one instance (nothing to keep apart)."""
    codes = np.unique(ev.instance_code)
    if len(codes) < 2:
        return None
    held = np.bincount(ev.instance_code[fw][in_op], minlength=int(codes.max()) + 1)[codes]
    best = codes[held == held.max()].tolist()
    return min(best, key=lambda code: ev.instances[code])


def _merge_apart(
    host: Trace, profile: ExplorerProfile, fw: np.ndarray, ops: HostOps, at: np.ndarray, mine: int
) -> ExplorerResult:
    """``merge_profile`` of a profile whose instances other than ``mine`` are placed apart:
    their host processes and threads get ids of their own (``HostIds``: a pid or thread id the
    host trace or ``mine``'s events use is replaced while placing, and a pid for good), their
    framework events become their ops (External ids above the host trace's), and their runtime
    events link to those ops only: streams by (instance, pid, thread), containment on their
    own placing thread ids."""
    ev = profile.events
    apart = ev.instance_code != mine
    c = host.columns
    taken_pids = frozenset(np.unique(c[S.PID]).tolist()) | frozenset(host.process_names)
    taken_pids |= frozenset(np.unique(ev.process_id[~apart]).tolist())
    taken_tids = frozenset(np.unique(c[S.TID]).tolist())
    taken_tids |= frozenset(np.unique(ev.thread_id[~apart]).tolist())
    hosts = HostIds.of(ev, apart, taken_pids, taken_tids)
    on_host = ~apart[fw]
    found = (at >= 0) & on_host
    safe = np.clip(at, 0, None)
    corr = np.where(found, ops.correlation[safe] if len(ops.correlation) else 0, 0)
    first = max(int(c[S.EXTERNAL_ID].max(initial=0)), FIRST_EXTERNAL_ID - 1) + 1
    corr[~on_host] = np.arange(first, first + int((~on_host).sum()))
    corr = corr.astype(np.int64)
    own = _framework_trace(profile, fw[~on_host], corr[~on_host], hosts)
    both = _with_ops_of(host, own)
    of_host = ThreadOps.of_host(ops)  # (matched on their instance: mine)
    of_host = dataclasses.replace(of_host, instance=np.full(len(of_host.pid), mine, np.int64))
    thread_ops = ThreadOps.joined(of_host, ThreadOps.of_framework(ev, fw[~on_host], corr[~on_host]))
    conv = to_activities(profile, corr, thread_ops, thread_id=hosts.tid)
    lookup = host_pid_lookup(host)
    merged = merge_activities(
        both,
        conv.acts,
        [profile.source],
        host_ops=HostOps.from_trace(both),
        host_pid=lambda tids: hosts.host_pid(tids, lookup),
    )
    tid = np.where(on_host, ev.thread_id[fw], hosts.tid[fw])
    pid = np.where(on_host, np.asarray(lookup(ev.thread_id[fw]), np.int64), hosts.pid[fw])
    op_start = np.where(found, ops.start_ns[safe] if len(ops.start_ns) else 0, -1)
    op_start = np.where(on_host, op_start, ev.start_ns[fw])
    result = _finish(
        profile, merged, conv, fw, (pid, tid, op_start), int(on_host.sum()), hosts=hosts
    )
    meta = dict(result.trace.metadata)
    meta[V.META_EXPLORER] = {
        **meta[V.META_EXPLORER],
        "host_trace_instance": ev.instances[mine],
    }
    trace = hosts.real_threads(dataclasses.replace(result.trace, metadata=meta))
    return dataclasses.replace(result, trace=trace)


def _with_ops_of(host: Trace, own: Trace) -> Trace:
    """``host`` with the rows and process names of ``own`` (apart instances' ops) added."""
    rows = {k: v for k, v in own.columns.items() if k not in (S.NAME_ID, S.CAT_ID, S.KIND)}
    rows.pop(S.ARGS_ROW)
    rows["names"] = (own.strings, own.columns[S.NAME_ID])
    rows["args"] = list(own.raw_args)
    both = appended_rows(host, rows, None, V.CAT_CPU_OP, kind_of(V.CAT_CPU_OP))
    return dataclasses.replace(both, process_names={**host.process_names, **own.process_names})


# -- the host side of a profile alone -------------------------------------------------------------
def _framework_trace(
    profile: ExplorerProfile, fw: np.ndarray, corr: np.ndarray, hosts: HostIds
) -> Trace:
    """The framework events as torch's cpu ops (columns built at once; args one per op), in
    their host process and thread (``hosts``)."""
    ev = profile.events
    n = len(fw)
    strings = [V.CAT_CPU_OP]
    name_base = len(strings)
    strings += list(ev.names)
    start, end = ev.start_ns[fw], np.maximum(ev.end_ns[fw], ev.start_ns[fw])
    raw_args = [b'{"%s":%d}' % (V.ARG_EXTERNAL_ID.encode(), c) for c in corr.tolist()]
    columns = {
        S.TS_NS: start,
        S.DUR_NS: end - start,
        S.PH: np.full(n, S.Phase.COMPLETE, dtype=np.uint8),
        S.KIND: np.full(n, kind_of(V.CAT_CPU_OP), dtype=np.uint8),
        S.NAME_ID: (ev.name_code[fw] + name_base).astype(np.int32),
        S.CAT_ID: np.zeros(n, dtype=np.int32),
        S.PID: hosts.pid[fw],
        S.TID: hosts.tid[fw],
        S.EXTERNAL_ID: corr,
        S.CORRELATION: np.full(n, -1, dtype=np.int64),
        S.STREAM: np.full(n, -1, dtype=np.int64),
        S.FLOW_ID: np.full(n, -1, dtype=np.int64),
        S.ARGS_ROW: np.arange(n, dtype=np.int64),
        S.FORM: S.default_column(S.FORM, n),
    }
    columns = {k: np.asarray(v).astype(S.default_column(k, 0).dtype) for k, v in columns.items()}
    order = np.argsort(columns[S.TS_NS], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    return Trace(
        columns=columns,
        strings=strings,
        raw_args=[raw_args[i] for i in order.tolist()],
        process_names=hosts.process_names,
        source=profile.source,
    )


# -- what is added to the placed trace ------------------------------------------------------------
def _finish(
    profile: ExplorerProfile,
    merged: MergeResult,
    conv: Converted,
    fw: np.ndarray,
    op_at: tuple[np.ndarray, np.ndarray, np.ndarray],
    superseded: int,
    hosts: HostIds | None = None,
) -> ExplorerResult:
    trace = _named_cores(merged, conv.cores)
    trace, arrows = _with_arrows(trace, merged, conv, fw, op_at)
    hbm_samples = hbm_bad = 0
    if profile.hbm is not None and len(profile.hbm):
        trace, hbm_bad = _with_hbm(trace, profile.hbm)
        hbm_samples = len(profile.hbm)
    meta = dict(trace.metadata)
    meta[V.META_EXPLORER] = {
        "files": list(profile.files),
        "legacy_json": profile.legacy,
        "framework_events": int(len(fw)),
        "framework_events_superseded_by_host_trace": int(superseded),
        "flow_arrows": int(arrows),
        "hbm_samples": int(hbm_samples),
        "hbm_samples_not_adding_up": int(hbm_bad),
        "collectives_without_ccop": int(conv.unmatched_cc),
        "events_ending_before_start": int(conv.bad_spans),
        "events_with_null_required_values": dict(profile.null_required),
        "framework_events_without_thread": int((profile.events.thread_id[fw] < 0).sum()),
        "runtime_calls_unlinked": _unlinked_calls(merged),
        **conv.streams.as_metadata(),
        **({"host_processes": hosts.as_metadata()} if hosts is not None else {}),
        "dma_packets": dict(profile.dma_packets),
        "dma_packet_bytes": dict(profile.dma_bytes),
        "summary": dict(profile.summary),
    }
    meta[V.META_SOURCE] = V.SOURCE_EXPLORER
    trace = dataclasses.replace(trace, metadata=meta)
    return ExplorerResult(trace, merged, conv, len(fw), arrows, hbm_samples, hbm_bad)


def _unlinked_calls(merged: MergeResult) -> int:
    """Runtime calls and exec stages that no rule linked to a host op (their device work and
    copies go unlinked with them): counted, so a profile whose links fail says so."""
    placed = merged.placed
    if placed is None:
        return 0
    calls = np.isin(placed.kind, [ActivityKind.RUNTIME_CALL, ActivityKind.EXEC_STAGE])
    return int((calls & (placed.external_id == 0)).sum())


def core_label(key: CoreKey, index: int) -> str:
    """A core's process name: "NeuronCore <nc_idx> (<instance> pid <pid>, worker <gid>)"."""
    where = f"{key.instance + ' ' if key.instance else ''}pid {key.process_id}"
    worker = f", worker {key.worker_gid}" if key.worker_gid >= 0 else ""
    core = str(key.nc_idx) if key.nc_idx >= 0 else f"? #{index}"
    return f"{V.CORE_PROCESS_PREFIX}{core} ({where}{worker})"


def _named_cores(merged: MergeResult, cores: list[CoreKey]) -> Trace:
    trace = merged.trace
    placed = merged.placed
    names = dict(trace.process_names)
    for p in placed.processes if placed is not None else ():
        if p.core < len(cores):
            names[p.pid] = core_label(cores[p.core], p.core)
    return dataclasses.replace(trace, process_names=names)


def _with_arrows(
    trace: Trace,
    merged: MergeResult,
    conv: Converted,
    fw: np.ndarray,
    op_at: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[Trace, int]:
    """An ac2g arrow from the op of each framework event to every event sharing its flow."""
    placed = merged.placed
    act, fw_row = conv.arrows
    if placed is None or not len(act):
        return trace, 0
    row_of_act = np.full(len(conv.acts), -1, dtype=np.int64)
    main = placed.kind != ActivityKind.GRAPH_OP  # a compiled graph's ops: not activities
    row_of_act[placed.activity[main]] = np.flatnonzero(main)
    fw_index = np.full(max(int(fw.max(initial=0)), int(fw_row.max(initial=0))) + 1, -1, np.int64)
    fw_index[fw] = np.arange(len(fw))
    k = fw_index[fw_row]
    end_row = row_of_act[act]
    pid, tid, ts = op_at
    ok = (k >= 0) & (end_row >= 0)
    ok[ok] = ts[k[ok]] >= 0
    k, end_row = k[ok], end_row[ok]
    m = len(k)
    flow_ids = trace.columns[S.FLOW_ID]
    base = max(int(flow_ids.max(initial=0)) + 1, int(placed.flow_id.max(initial=0)) + 1)
    ids = np.arange(base, base + m, dtype=np.int64)
    rows = {
        S.TS_NS: np.concatenate([ts[k], placed.start_ns[end_row]]),
        S.PH: np.repeat(np.array([S.Phase.FLOW_START, S.Phase.FLOW_END], np.uint8), m),
        S.PID: np.concatenate([pid[k], placed.pid[end_row]]),
        S.TID: np.concatenate([tid[k], placed.tid[end_row]]),
        S.FLOW_ID: np.concatenate([ids, ids]),
    }
    return appended_rows(trace, rows, V.CAT_FLOW, V.CAT_FLOW, kind_of(V.CAT_FLOW)), m


def _with_hbm(trace: Trace, hbm: HbmColumns) -> tuple[Trace, int]:
    """Counter samples per (instance, device), one counter per HBM, series = categories used."""
    cats = list(hbm.categories)
    values = (
        np.stack([hbm.categories[c] for c in cats], axis=1) if cats else np.zeros((len(hbm), 0))
    )
    mismatched = int((values.sum(axis=1) != hbm.total).sum())
    dev_keys = np.stack([hbm.instance_code, hbm.device_idx])
    distinct, device = np.unique(dev_keys, axis=1, return_inverse=True)
    device = device.reshape(-1)
    used_pids = set(trace.process_names) | set(np.unique(trace.columns[S.PID]).tolist())
    pid_of, names = [], dict(trace.process_names)
    spare = V.RELOCATED_PID_BASE * 2
    for inst, dev in distinct.T.tolist():
        while spare in used_pids:
            spare += 1
        used_pids.add(spare)
        pid_of.append(spare)
        names[spare] = V.hbm_process_name(dev, hbm.instances[inst])
    used = [(values[device == d] != 0).any(axis=0) for d in range(distinct.shape[1])]
    keys = [c[: -len(X.HBM_CATEGORY_SUFFIX)] for c in cats]
    args = [
        msgspec.json.encode(dict(zip(_pick(keys, used[d]), _pick(row, used[d]), strict=True)))
        for d, row in zip(device.tolist(), values.tolist(), strict=True)
    ]
    counter_names = sorted(set(hbm.hbm_idx.tolist()))
    name_index = {h: i for i, h in enumerate(counter_names)}
    rows = {
        S.TS_NS: hbm.timestamp,
        S.PH: np.full(len(hbm), S.Phase.COUNTER, dtype=np.uint8),
        S.PID: np.asarray(pid_of, dtype=np.int64)[device],
        S.TID: np.zeros(len(hbm), dtype=np.int64),
        "names": (
            [V.hbm_counter_name(h) for h in counter_names],
            [name_index[h] for h in hbm.hbm_idx.tolist()],
        ),
        "args": args,
    }
    trace = appended_rows(trace, rows, None, V.CAT_HBM_USAGE, kind_of(V.CAT_HBM_USAGE))
    return dataclasses.replace(trace, process_names=names), mismatched


def _pick(items: list[Any], mask: np.ndarray) -> list[Any]:
    return [x for x, keep in zip(items, mask.tolist(), strict=True) if keep]
