"""Several host processes in one profile (tests/explorer_fixture.py ``hosts``): processes number
their flows alike, and AWS says process and thread ids repeat across instances, so a process is
(instance, pid). Every event must link to the op of its own process, and each process must be
a process of its own in the exported trace, with its real thread ids."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer_fixture import INSTANCE, PID, US, Host, build  # noqa: E402
from explorer_support import require_pyarrow  # noqa: E402

from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

OTHER_INSTANCE = "i-0synthetic00000002"
CASES = {
    # a second worker process on the same instance, its flows numbered like the first's
    "two processes, same flow ids": (Host(), Host(pid=4343, tid_offset=100, shift_ns=7 * US)),
    # the same pid and thread ids on a second instance, same flow ids
    "two instances, same pid and flow ids": (
        Host(),
        Host(instance=OTHER_INSTANCE, shift_ns=7 * US),
    ),
    # as above with distinct flow ids: links were right before and must stay right
    "two instances, distinct flow ids": (
        Host(),
        Host(instance=OTHER_INSTANCE, shift_ns=7 * US, flow_offset=1_000),
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    fx = build(executions=2, hosts=CASES[request.param])
    directory = fx.write(tmp_path_factory.mktemp("hosts"))
    return request.param, fx, profile_trace(read_profile(directory))


def _rows(trace) -> list[tuple[int, int, int, int, int]]:  # noqa: ANN001
    """(start, end, pid, tid, External id) of every slice and instant of ``trace`` (rows are
    named by kind there, ``Memcpy HtoD``...: the span says which event a row is)."""
    c = trace.columns
    rows = np.flatnonzero(np.isin(c[S.PH], [S.Phase.COMPLETE, S.Phase.INSTANT]))
    cols = (c[S.TS_NS], c[S.TS_NS] + c[S.DUR_NS], c[S.PID], c[S.TID], c[S.EXTERNAL_ID])
    return list(zip(*(col[rows].tolist() for col in cols), strict=True))


def _host_pids(trace) -> dict[str, int]:  # noqa: ANN001
    """Host process name ("<instance> pid <pid>") -> its pid in the trace."""
    names = {
        name: pid
        for pid, name in trace.process_names.items()
        if not name.startswith((V.CORE_PROCESS_PREFIX, "Neuron device"))
    }
    assert len(names) == len(set(trace.process_names.values()) & set(names))  # no name twice
    return names


def test_every_event_links_to_the_op_of_its_own_process(exported) -> None:  # noqa: ANN001
    """External ids from the generator: framework events 1, 2, ... in start order over both
    processes; every other event the id of the op of ITS process that dispatched it."""
    _, fx, res = exported
    got = Counter((s, e, x) for s, e, _, _, x in _rows(res.trace))
    want = Counter((*fx.truth.span[e], x) for e, x in fx.truth.external.items())
    assert got & want == want  # each event's row carries the generator's External id
    assert res.arrows == 2 * 2 * 2  # two exec stages per execution, per process


def test_each_process_is_its_own_with_its_real_threads(exported) -> None:  # noqa: ANN001
    case, fx, res = exported
    trace = res.trace
    pids = _host_pids(trace)
    names = {f"{h.instance} pid {h.pid}" for h in fx.hosts}
    assert set(pids) == names and len(set(pids.values())) == 2
    got = Counter((s, e, p, t) for s, e, p, t, _ in _rows(trace))
    want: Counter[tuple[int, int, int, int]] = Counter()
    for eid, tid in fx.truth.host.items():  # runtime calls and exec stages: their own thread
        h = fx.host_of(eid)
        want[(*fx.truth.span[eid], pids[f"{h.instance} pid {h.pid}"], tid)] += 1
    for eid in fx.truth.framework_ids:  # the framework ops: their process, their thread
        h, tid = fx.host_of(eid), fx.events[eid - 1]["thread_id"]
        want[(*fx.truth.span[eid], pids[f"{h.instance} pid {h.pid}"], tid)] += 1
    assert got & want == want
    # device rows: the cores of their own process
    core_of = {p: n for p, n in trace.process_names.items() if n.startswith(V.CORE_PROCESS_PREFIX)}
    got_cores = Counter((s, e, core_of.get(p, "")) for s, e, p, _, _ in _rows(trace))
    want_cores = Counter(
        (
            *fx.truth.span[e],
            f"{V.CORE_PROCESS_PREFIX}{c} ({fx.host_of(e).instance} pid {fx.host_of(e).pid}, "
            f"worker {100 + c})",
        )
        for e, c in fx.truth.core.items()
    )
    assert got_cores & want_cores == want_cores
    meta = trace.metadata[V.META_EXPLORER]["host_processes"]
    assert sorted((m["instance"], m["process_id"]) for m in meta) == sorted(
        (h.instance, h.pid) for h in fx.hosts
    )
    assert {m["pid"] for m in meta} == set(pids.values())


def test_slices_of_a_host_thread_nest(exported) -> None:  # noqa: ANN001
    """Two processes drawn on one thread would overlap: on each thread every slice either holds
    the next one or ends before it starts."""
    _, _, res = exported
    pids = set(_host_pids(res.trace).values())
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s, e, p, t, _ in _rows(res.trace):
        if p in pids:
            by_thread.setdefault((p, t), []).append((s, -e))
    for spans in by_thread.values():
        open_ends: list[int] = []
        for s, neg_end in sorted(spans):
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            assert not open_ends or -neg_end <= open_ends[-1], "crossing slices"
            open_ends.append(-neg_end)


def test_one_process_keeps_its_pid_and_threads(tmp_path: Path) -> None:
    """Without a shared pid or thread id nothing moves: the generator's ids as they are."""
    from neuron_profiler.explorer.hosts import HostIds
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    fx = build(executions=1)
    hosts = HostIds.of(read_profile(fx.write(tmp_path / "p")).events)
    assert [(p.pid, p.instance, p.process_id) for p in hosts.processes] == [(PID, INSTANCE, PID)]
    assert hosts.pid.tolist() == [PID] * len(fx.events)
    assert hosts.tid.tolist() == [e["thread_id"] for e in fx.events]


@pytest.mark.parametrize("rows", [0, 1, 1000])
def test_key_codes_are_numpy_uniques_of_the_tuples(rows: int) -> None:
    from neuron_profiler.explorer.columns import key_codes

    rng = np.random.default_rng(rows)
    cols = (
        rng.integers(-1, 3, rows),
        rng.integers(-5, 5, rows) * 10**15,  # values far apart: no arithmetic on them
        rng.integers(0, 4, rows),
    )
    code, distinct = key_codes(*cols)
    want, inverse = np.unique(np.stack(cols).reshape(3, rows), axis=1, return_inverse=True)
    assert code.tolist() == inverse.reshape(-1).tolist()
    assert [d.tolist() for d in distinct] == want.tolist()


def test_processes_without_a_pid_stay_apart_per_instance(tmp_path: Path) -> None:
    """A null ``process_id`` on two instances: two processes, each named "<instance> pid ?",
    each holding its own instance's framework ops (nothing merged)."""
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    hosts = (Host(), Host(instance=OTHER_INSTANCE, shift_ns=7 * US))
    fx = build(executions=1, hosts=hosts)
    for ev in fx.events:
        ev["process_id"] = None
    res = profile_trace(read_profile(fx.write(tmp_path / "p")))
    pids = _host_pids(res.trace)
    assert set(pids) == {f"{INSTANCE} pid ?", f"{OTHER_INSTANCE} pid ?"}
    c = res.trace.columns
    ops = c[S.KIND] == S.EventKind.CPU_OP
    got = Counter(zip(c[S.TS_NS][ops].tolist(), c[S.PID][ops].tolist(), strict=True))
    want = Counter(
        (fx.truth.span[e][0], pids[f"{fx.host_of(e).instance} pid ?"])
        for e in fx.truth.framework_ids
    )
    assert got == want


# -- merged onto a host trace ----------------------------------------------------------------------
def _host_trace_of(fx, instance: str):  # noqa: ANN001, ANN202
    """torch.profiler's trace of one instance's process: its framework ops as cpu ops on their
    own pid and threads, with External ids of their own (50000 + k); and each op's id by the
    generator's External id of the framework event it stands for."""
    from neuron_profiler.trace.model import TraceBuilder

    b = TraceBuilder("host.json")
    host_id = {}
    for k, eid in enumerate(
        e for e in fx.truth.framework_ids if fx.host_of(e).instance == instance
    ):
        ev = fx.events[eid - 1]
        host_id[fx.truth.external[eid]] = 50_000 + k
        b.add(
            name=ev["name"],
            ts_ns=ev["start_ts"],
            dur_ns=ev["end_ts"] - ev["start_ts"],
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=ev["process_id"],
            tid=ev["thread_id"],
            args={"External id": 50_000 + k},
        )
    return b.build(), host_id


@pytest.mark.parametrize("streams", [False, True])
@pytest.mark.parametrize("host_is", [INSTANCE, OTHER_INSTANCE])
def test_merged_instances_sharing_pid_and_tids_keep_their_threads_apart(
    tmp_path: Path, host_is: str, streams: bool
) -> None:
    """Two instances with the same pid and thread ids, merged onto the host trace of one of
    them (torch.profiler names no instance): the instance whose framework events the host
    trace's ops hold is the host trace's (its events link to the host ops, on the host trace's
    threads); the other's host processes are placed as exported alone: a process of its own
    ("<instance> pid <pid>", a pid apart), its framework events its ops, its runtime calls on
    its own real thread ids there, never on a host trace thread. ``streams``: calls on a
    worker thread linked by ``framework_stream_id`` (a decoy op on that thread), per instance."""
    from neuron_profiler.explorer.profile_trace import merge_profile
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    hosts = (Host(), Host(instance=OTHER_INSTANCE, shift_ns=7 * US))
    fx = build(executions=2, streams=streams, hosts=hosts)
    host, host_id = _host_trace_of(fx, host_is)
    res = merge_profile(host, read_profile(fx.write(tmp_path / "p")))
    trace = res.trace
    other = OTHER_INSTANCE if host_is == INSTANCE else INSTANCE
    pids = _host_pids(trace)
    assert f"{other} pid {PID}" in pids and pids[f"{other} pid {PID}"] != PID
    apart = pids[f"{other} pid {PID}"]
    # every host-side row (runtime calls, exec stages, ops) on the thread of its own instance
    got = Counter((s, e, p, t) for s, e, p, t, _ in _rows(trace))
    want: Counter[tuple[int, int, int, int]] = Counter()
    for eid, tid in fx.truth.host.items():
        want[(*fx.truth.span[eid], PID if fx.host_of(eid).instance == host_is else apart, tid)] += 1
    for eid in fx.truth.framework_ids:
        if fx.host_of(eid).instance == other:  # (the host instance's: the host trace's ops)
            want[(*fx.truth.span[eid], apart, fx.events[eid - 1]["thread_id"])] += 1
    assert got & want == want
    # links: the host instance's events to the host ops, the other's to its own ops
    ext = {(s, e): x for s, e, p, _, x in _rows(trace)}
    ops = {(s, e, t): x for s, e, p, t, x in _rows(trace) if p == apart}  # (a decoy: same span)
    checked = 0
    for eid, x in fx.truth.external.items():
        if eid in fx.truth.framework_ids or fx.truth.span[eid] not in ext:
            continue
        if fx.host_of(eid).instance == host_is:
            assert ext[fx.truth.span[eid]] == host_id[x], eid
        else:
            (root,) = [f for f in fx.truth.framework_ids if fx.truth.external[f] == x]
            op = ops[(*fx.truth.span[root], fx.events[root - 1]["thread_id"])]
            assert ext[fx.truth.span[eid]] == op > 50_000 + len(host_id) - 1, eid
        checked += 1
    assert checked == len(fx.truth.external) - len(fx.truth.framework_ids)  # every one placed
    meta = trace.metadata[V.META_EXPLORER]
    assert meta["host_trace_instance"] == host_is
    assert [(m["instance"], m["process_id"], m["pid"]) for m in meta["host_processes"]] == [
        (other, PID, apart)
    ]


def test_the_host_trace_instance_is_the_one_its_ops_hold() -> None:
    """By hand: the instance with the most framework events inside host ops; the first by
    name on a tie or when none is held (codes follow the file, not names); none at all for a
    profile of one instance."""
    from types import SimpleNamespace

    from neuron_profiler.explorer.profile_trace import _host_instance

    ev = SimpleNamespace(instance_code=np.array([0, 0, 1, 1, 1, 2]), instances=["b", "a", "c"])
    fw = np.array([0, 1, 2, 3, 5])
    assert _host_instance(ev, fw, np.array([True, False, True, True, False])) == 1
    assert _host_instance(ev, fw, np.array([False, False, False, False, True])) == 2
    assert _host_instance(ev, fw, np.array([True, False, True, False, False])) == 1  # a tie: "a"
    assert _host_instance(ev, fw, np.zeros(5, bool)) == 1
    one = SimpleNamespace(instance_code=np.zeros(4, np.int64), instances=["a"])
    assert _host_instance(one, np.arange(4), np.ones(4, bool)) is None
