"""Steps, step breakdown and idle causes on small synthetic traces: totals against a brute-force
µs grid, each cause rule on a trace built to trigger it, and the documented rule for the idle
time after a step's final sync that runs into the next step's data stall."""

from __future__ import annotations

import numpy as np
import pytest
from trace_factory import Build

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis.causes import LaunchThreads
from neuron_profiler.analysis.report import NOTE_HOST_ONLY, NOTE_NO_STEPS
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

US = 1000


def _causes(report) -> dict[str, int]:  # noqa: ANN001
    return {k: v // US for k, v in report.idle.by_cause_ns.items() if v}


def test_each_cause_rule() -> None:
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    b.host(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        120,
        180,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
    )
    b.kernel(200, 300, launch_us=190)  # gap 100-200: data loading
    b.host(
        V.FALLBACK_PREFIX + "aten::bincount", 320, 380, kind=EventKind.FALLBACK, cat=V.CAT_RUNTIME
    )
    b.kernel(400, 500, launch_us=390)  # gap 300-400: CPU fallback
    b.host(V.SYNC_PREFIX + "item", 450, 520, kind=EventKind.RUNTIME, cat=V.CAT_RUNTIME)
    b.kernel(600, 650, launch_us=590)  # gap 500-600: host sync
    b.kernel(700, 750, launch_us=680)  # gap 650-700: host-bound launch
    b.kernel(800, 850, launch_us=600)  # gap 750-800: other (queued early)
    b.kernel(870, 1000, launch_us=600)  # gap 850-870: short
    r = b.report()
    assert _causes(r) == {
        "data_loading": 100,
        "cpu_fallback": 100,
        "host_sync": 100,
        "host_bound_launch": 50,
        "other": 50,
        "short_gaps": 20,
    }
    assert r.notes == ()
    longest = {(g.start_ns // US, g.cause) for g in r.idle.longest}
    assert (100, "data_loading") in longest and (750, "other") in longest


def test_final_sync_then_next_steps_data_stall_is_data_loading() -> None:
    """Step 1 ends with a sync (the host waits for the device, which then idles); step 2 begins
    with a DataLoader __next__. The gap overlaps both: data loading wins, and its time is split
    over the two steps at the boundary."""
    b = Build().step(1, 0, 400).step(2, 400, 1000)
    b.kernel(0, 300, launch_us=0)
    b.host(V.SYNC_PREFIX + "item", 100, 310, kind=EventKind.RUNTIME, cat=V.CAT_RUNTIME)
    b.host(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        400,
        650,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
    )
    b.kernel(700, 1000, launch_us=690)
    r = b.report()
    device = r.idle.devices[0]
    assert device.by_cause_ns["data_loading"] == 400 * US
    assert device.by_cause_ns["host_sync"] == 0
    assert [s["data_loading"] // US for s in device.per_step_by_cause_ns] == [100, 300]
    # without the data stall the same gap is the sync's
    b2 = Build().step(1, 0, 400).step(2, 400, 1000)
    b2.kernel(0, 300, launch_us=0)
    b2.host(V.SYNC_PREFIX + "item", 100, 310, kind=EventKind.RUNTIME, cat=V.CAT_RUNTIME)
    b2.kernel(700, 1000, launch_us=690)
    assert b2.report().idle.devices[0].by_cause_ns["host_sync"] == 400 * US


def test_gap_kept_whole_across_the_host_time_between_two_steps() -> None:
    """ProfilerStep spans leave host time between them (``p.step()`` itself). A gap from step
    1's final sync to step 2's first work is one gap (data loading: the DataLoader covers half
    of it), counted only inside the steps; cut at the hole, its first part would be the sync's."""
    b = Build().step(1, 0, 400).step(2, 450, 1000)
    b.kernel(0, 300, launch_us=0)
    b.host(V.SYNC_PREFIX + "item", 100, 310, kind=EventKind.RUNTIME, cat=V.CAT_RUNTIME)
    b.host(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        450,
        650,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
    )
    b.kernel(700, 1000, launch_us=690)
    device = b.report().idle.devices[0]
    assert _causes_of(device) == {"data_loading": 350}
    assert [s["data_loading"] // US for s in device.per_step_by_cause_ns] == [100, 250]
    assert device.window_ns == device.busy_ns + device.idle_ns == 950 * US


def test_short_gap_launched_late_is_host_bound() -> None:
    """Under --min-gap, a gap whose work was launched after it began is the host's (a loop of
    tiny ops); one whose work was already queued is launch latency (short_gaps)."""
    b = Build().step(1, 0, 100)
    b.kernel(0, 10, launch_us=0).kernel(30, 40, launch_us=25).kernel(60, 100, launch_us=5)
    assert _causes(b.report()) == {"host_bound_launch": 20, "short_gaps": 20}


def test_emulator_overhead_is_discounted_and_kineto_overhead_stays_a_cause() -> None:
    """Emulator-overhead spans (the emulator's own host math) are taken out of the gaps before
    the rules run and reported apart; Kineto's profiler-overhead rows remain a cause."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    ovh = dict(kind=EventKind.OTHER, cat=V.CAT_OVERHEAD)
    b.host(V.OVERHEAD_PREFIX + "numerics", 110, 290, **ovh)
    b.kernel(300, 400, launch_us=295)  # gap 100-300: 20 µs left, launched late
    b.host(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        400,
        480,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
    )
    b.host(V.OVERHEAD_PREFIX + "numerics", 480, 580, **ovh)
    b.kernel(600, 700, launch_us=390)  # gap 400-600: the DataLoader covers 80 of 100 left
    b.host("Activity Buffer Request", 700, 890, **ovh)
    b.kernel(900, 1000, launch_us=650)  # gap 700-900: Kineto's own overhead
    r = b.report()
    device = r.idle.devices[0]
    assert _causes(r) == {"host_bound_launch": 20, "data_loading": 100, "profiler_overhead": 200}
    assert device.emulator_overhead_ns == 280 * US
    assert device.per_step_emulator_overhead_ns == (280 * US,)
    assert device.window_ns == device.busy_ns + device.idle_ns + device.emulator_overhead_ns
    assert all("overhead" not in f.kind for f in r.findings.findings)
    assert any(n.startswith("emulator overhead") for n in r.notes)
    gap = next(g for g in r.idle.longest if g.start_ns == 400 * US)
    assert (gap.cause, gap.idle_ns, gap.emulator_overhead_ns) == (
        "data_loading",
        100 * US,
        100 * US,
    )


def _causes_of(device) -> dict[str, int]:  # noqa: ANN001
    return {k: v // US for k, v in device.by_cause_ns.items() if v}


def test_no_steps_is_one_step_and_says_so() -> None:
    b = Build()
    b.host("aten::mm", 0, 10)
    b.kernel(20, 120, launch_us=10).kernel(300, 400, launch_us=290)
    r = b.report()
    assert r.steps.names == ("0",) and NOTE_NO_STEPS in r.notes
    assert r.breakdown.wall_ns.tolist() == [400 * US]
    assert r.idle.devices[0].idle_ns == 200 * US


def test_host_only_trace() -> None:
    r = Build().step(1, 0, 100).host("aten::add", 10, 20).report()
    assert NOTE_HOST_ONLY in r.notes and not r.has_device
    assert r.idle.devices == () and r.breakdown.devices == ()
    assert r.hta_temporal is None and r.hta_idle is None


@pytest.mark.parametrize("seed", range(8))
def test_breakdown_and_idle_against_brute_force(seed: int) -> None:
    """Random work on two devices and three queue kinds, random steps: per step and device,
    busy / compute / DMA / collective / overlap / idle equal a 1 µs grid count, and the idle
    causes add up to the idle time."""
    rng = np.random.default_rng(seed)
    horizon = 2000
    bounds = np.sort(rng.choice(np.arange(50, horizon - 50), 3, replace=False))
    edges = [0, *bounds.tolist(), horizon]
    b = Build()
    for n, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        b.step(n + 1, lo, hi)
    grids = {}
    for device in (0, 1):
        grid = np.zeros((3, horizon + 200), bool)
        for _ in range(40):
            queue = int(rng.integers(3))
            s = int(rng.integers(0, horizon + 100))
            e = s + int(rng.integers(0, 60))
            kind, name = [
                (EventKind.KERNEL, "TensorE: mm"),
                (EventKind.MEMCPY, "Memcpy HtoD"),
                (EventKind.KERNEL, "CC: allreduce"),
            ][queue]
            b.kernel(
                s,
                e,
                device=device,
                launch_us=max(0, s - int(rng.integers(0, 80))),
                kind=kind,
                name=name,
                stream=1 + queue,
            )
            grid[queue, s:e] = True
        grids[device] = grid
    r = b.report(min_gap_us=int(rng.integers(1, 100)))
    last_end = r.steps.end_ns[-1] // US
    spans = list(
        zip((r.steps.start_ns // US).tolist(), (r.steps.end_ns // US).tolist(), strict=True)
    )
    assert spans[:-1] == list(zip(edges[:-2], edges[1:-1], strict=True))
    assert last_end >= horizon
    for dev in r.breakdown.devices:
        g = grids[dev.device]
        for i, (lo, hi) in enumerate(spans):
            busy = g[:, lo:hi].any(axis=0)
            assert dev.busy_ns[i] == busy.sum() * US
            assert dev.compute_ns[i] == g[0, lo:hi].sum() * US
            assert dev.dma_ns[i] == g[1, lo:hi].sum() * US
            assert dev.collective_ns[i] == g[2, lo:hi].sum() * US
            assert dev.overlap_ns[i] == (g[0, lo:hi] & g[2, lo:hi]).sum() * US
            assert dev.not_busy_ns[i] == (~busy).sum() * US
    for dev in r.idle.devices:
        g = grids[dev.device].any(axis=0)
        assert dev.idle_ns == (~g[0:last_end]).sum() * US
        assert sum(dev.by_cause_ns.values()) == dev.idle_ns
        for i, (lo, hi) in enumerate(spans):
            assert sum(dev.per_step_by_cause_ns[i].values()) == (~g[lo:hi]).sum() * US


def _runs(grid: np.ndarray) -> list[tuple[int, int]]:
    """The canonical interval set of a boolean grid: maximal runs of True, in order."""
    edges = np.diff(np.concatenate([[0], grid.astype(np.int8), [0]]))
    return list(
        zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True)
    )


def _pairs_of(x: I.Intervals) -> list[tuple[int, int]]:
    return list(zip(x.start.tolist(), x.end.tolist(), strict=True))


@pytest.mark.parametrize(
    ("seed", "count", "longest"),
    [(s, 30, 40) for s in range(5)] + [(s, 200, 6) for s in range(5, 10)],
)
def test_interval_operations_against_grid(seed: int, count: int, longest: int) -> None:
    """Every operation gives exactly the grid's runs: sorted, disjoint, touching pieces merged
    (short intervals on a dense range make many shared and touching boundaries)."""
    rng = np.random.default_rng(seed)

    def random_set() -> tuple[I.Intervals, np.ndarray]:
        s = rng.integers(0, 500, count)
        e = s + rng.integers(-5, longest, count)
        grid = np.zeros(600, bool)
        for lo, hi in zip(s.tolist(), e.tolist(), strict=True):
            grid[lo : max(lo, hi)] = True
        return I.union(s, e), grid

    (a, ga), (b, gb) = random_set(), random_set()
    assert a.total == ga.sum() and _pairs_of(a) == _runs(ga)
    assert _pairs_of(I.intersect(a, b)) == _runs(ga & gb)
    assert _pairs_of(I.subtract(a, b)) == _runs(ga & ~gb)
    assert _pairs_of(I.subtract(b, a)) == _runs(gb & ~ga)
    lo = rng.integers(0, 550, 10)
    hi = lo + rng.integers(0, 50, 10)
    want = [ga[x:y].sum() for x, y in zip(lo.tolist(), hi.tolist(), strict=True)]
    assert I.overlap_per_window(a, lo, hi).tolist() == want


@pytest.mark.parametrize("steps", ["disjoint", "touching", "overlapping"])
def test_idle_per_cause_in_one_pass_as_cause_by_cause(steps: str) -> None:
    """Counted idle per device and cause, and per step window and cause, from one pass over
    all gaps (``idle._by_cause``): the sums of measuring each cause's gaps on their own, as
    ``_counted`` and ``overlap_per_window`` do, for steps that are disjoint, that touch (a gap
    across the boundary falls in both) and that overlap (measured cause by cause)."""
    from neuron_profiler.analysis import idle
    from neuron_profiler.analysis._axis import DeviceAxis
    from neuron_profiler.analysis.causes import ALL_CAUSES

    rng = np.random.default_rng(11)
    devices, width = 5, 10_000
    axis = DeviceAxis(devices=tuple(range(devices)), index=np.arange(devices), base=0, width=width)
    bounds = {
        "disjoint": ([100, 3000, 6000], [2500, 5500, 9000]),
        "touching": ([100, 3000, 6000], [3000, 6000, 9000]),
        "overlapping": ([100, 2000, 6000], [3000, 5500, 9000]),
    }[steps]
    start, end = np.array(bounds[0], np.int64), np.array(bounds[1], np.int64)
    inside = axis.replicate(I.union(start, end))
    cuts = np.sort(rng.choice(np.arange(1, devices * width), 400, replace=False))
    gap = I.Intervals(cuts[0::2], cuts[1::2])  # disjoint gaps, some across devices' ends
    cause = rng.integers(0, len(ALL_CAUSES), len(gap))
    discount = I.union(
        *(lambda s: (s, s + rng.integers(1, 300, len(s))))(
            np.sort(rng.integers(0, devices * width, 40))
        )
    )
    ws, we = (w.ravel() for w in axis.windows(start, end))
    by_cause, per_step = idle._by_cause(axis, gap, cause, inside, discount, ws, we)
    for code in range(len(ALL_CAUSES)):
        mine = cause == code
        part = idle._counted(I.Intervals(gap.start[mine], gap.end[mine]), inside, discount)
        assert by_cause[:, code].tolist() == axis.total_per_device(part).tolist()
        assert per_step[:, code].tolist() == I.overlap_per_window(part, ws, we).tolist()
    assert by_cause.sum() > 0 and per_step.sum() > 0


def test_devices_sharing_launching_threads_share_one_set() -> None:
    """(device, thread) pairs, sorted: devices 0 and 3 launched by thread 7, 1 and 4 by
    threads 7 and 9, 2 by nothing (every thread), 5 by thread 9: three sets, each one's threads
    listed once, sorted by thread."""
    dev = np.array([0, 1, 1, 3, 4, 4, 5])
    thread = np.array([7, 7, 9, 7, 7, 9, 9])
    lt = LaunchThreads.of(dev, thread, 6)
    s = lt.of_device
    assert s[2] == -1
    assert s[0] == s[3] and s[1] == s[4] and len({s[0], s[1], s[5]}) == 3
    members = sorted(zip(lt.member_thread.tolist(), lt.member_set.tolist(), strict=True))
    assert members == sorted([(7, s[0]), (7, s[1]), (9, s[1]), (9, s[5])])
    assert lt.member_thread.tolist() == sorted(lt.member_thread.tolist())


def test_many_devices_each_judged_on_its_launching_threads() -> None:
    """Six devices on one axis, each idle 100-400 µs: 0 and 2 launched by thread 100 (in a
    DataLoader 100-390), 1 and 3 by thread 101 (in a slow op 120-380, launching late), 4 by
    both, 5 by no linked launch. The DataLoader's devices (0, 2, 4) and the unlinked one (5)
    wait for data (300 µs each); 1 and 3 for their host's late launch."""
    b = Build().step(1, 0, 1000)
    threads = {0: (100,), 1: (101,), 2: (100,), 3: (101,), 4: (100, 101), 5: ()}
    for device, tids in threads.items():
        b.kernel(0, 100, device=device, launch_us=0 if tids else None, tid=(tids or (0,))[0])
        b.kernel(400, 1000, device=device, launch_us=390 if tids else None, tid=(tids or (0,))[-1])
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 100, 390)
    b.host("aten::slow_host_op", 120, 380, tid=101)
    r = b.report()
    by = {
        d.device: (d.by_cause_ns["data_loading"], d.by_cause_ns["host_bound_launch"])
        for d in r.idle.devices
    }
    loading, late = (300 * US, 0), (0, 300 * US)
    assert by == {0: loading, 1: late, 2: loading, 3: late, 4: loading, 5: loading}


def test_kinetos_overhead_counts_on_any_thread() -> None:
    """Kineto writes its own overhead on a process of its own (pid -1): its ``Activity Buffer
    Request`` (100-390 µs) owns the gap 100-400 of a device whose work thread 100 launched
    (at 20, early: no late launch), although no launching thread ran it."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.b.add(
        name="Activity Buffer Request",
        ts_ns=100 * US,
        dur_ns=290 * US,
        kind=EventKind.OTHER,
        cat=V.CAT_OVERHEAD,
        pid=-1,
        tid=0,
    )
    b.kernel(400, 1000, launch_us=20)
    assert _causes(b.report())["profiler_overhead"] == 300


def _fallback_trace(tmp_path, category: str):  # noqa: ANN001, ANN202
    """One step (µs): a kernel 10-100, then ``CPU fallback: aten::nonzero`` 120-380 filed under
    ``category`` on the launching thread, holding its D2H copy (launched at 125, on the device
    130-150), its ``host sync`` wait for it (126-152) and its H2D copy (launched at 360, 365-375);
    the next kernel launches at 390 and runs 400-1000. The 150-365 gap (215 µs) is the
    fallback's, and its wait is part of it, no host sync."""
    import json

    from neuron_profiler.trace import load_trace

    host, rt = {"pid": 100, "tid": 100}, V.CAT_RUNTIME

    def span(cat: str, name: str, ts: int, dur: int, **more: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **host, **more}

    def call(name: str, ts: int, corr: int) -> dict:
        return span(rt, name, ts, 1, args={"correlation": corr})

    def work(cat: str, name: str, stream: int, ts: int, dur: int, corr: int) -> dict:
        args = {"device": 0, "stream": stream, "correlation": corr, "bytes": 64}
        return span(cat, name, ts, dur, pid=0, tid=stream, args=args)

    events = [
        span("user_annotation", "ProfilerStep#1", 0, 1000),
        call("nrt launch: mm", 0, 1),
        work("kernel", "TensorE: mm", 1, 10, 90, 1),
        span(category, V.FALLBACK_PREFIX + "aten::nonzero", 120, 260),
        call("nrt copy: D2H", 125, 2),
        work("gpu_memcpy", "Memcpy DtoH (NeuronCore -> Host)", 2, 130, 20, 2),
        span(rt, V.SYNC_PREFIX + "aten::nonzero", 126, 26),
        call("nrt copy: H2D", 360, 3),
        work("gpu_memcpy", "Memcpy HtoD (Host -> NeuronCore)", 2, 365, 10, 3),
        call("nrt launch: mm", 390, 4),
        work("kernel", "TensorE: mm", 1, 400, 600, 4),
    ]
    path = tmp_path / f"{category}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return load_trace(path)


@pytest.mark.parametrize("category", [V.CAT_RUNTIME, "cpu_op"])
def test_a_fallback_row_filed_as_an_op_is_a_fallback_not_a_sync(tmp_path, category: str) -> None:  # noqa: ANN001
    """A ``CPU fallback:`` row under ``cpu_op`` (another tool's filing) is read by the one rule
    that classifies rows (``kinds.refine_kinds``) as the runtime-category row is: its wait is
    the fallback's, its gap a CPU fallback, and the sync table lists nothing."""
    from neuron_profiler.analysis import Options, analyze

    trace = _fallback_trace(tmp_path, category)
    row = [trace.name(r) for r in range(len(trace))].index(V.FALLBACK_PREFIX + "aten::nonzero")
    assert trace.col("kind")[row] == EventKind.FALLBACK
    report = analyze(trace, Options(min_gap_ns=50 * US, top=50))
    assert _causes(report)["cpu_fallback"] == 215 and "host_sync" not in _causes(report)
    assert report.findings.syncs == ()
    assert [(g.op, g.calls) for g in report.findings.fallbacks] == [("aten::nonzero", 1)]
