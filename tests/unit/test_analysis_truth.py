"""Every finding is a cause the user can act on, counted once (issue: analyzer truth). Small
synthetic traces, one per rule, with the expected figures worked out by hand (µs)."""

from __future__ import annotations

import json

from trace_factory import US, Build

from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

RUNTIME = {"kind": EventKind.RUNTIME, "cat": V.CAT_RUNTIME}


def _d2h(b: Build, start: int, end: int, launch: int) -> Build:
    return b.kernel(
        start, end, launch_us=launch, kind=EventKind.MEMCPY, stream=2, name=V.MEMCPY_NAMES["d2h"]
    )


def test_item_of_a_host_tensor_is_no_sync() -> None:
    """An optimizer's step counter: aten::item with nothing inside waits on nothing; the gap
    that begins in it is the host's late launch, not a sync."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host("aten::item", 90, 300)
    b.host("aten::_local_scalar_dense", 95, 295)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    assert r.findings.syncs == ()
    assert r.idle.by_cause_ns["host_sync"] == 0
    assert r.idle.by_cause_ns["host_bound_launch"] == 300 * US


def test_item_that_copies_from_the_device_is_a_sync() -> None:
    """The same .item() holding a D2H copy's launch (CUDA: cudaMemcpyAsync, ours: a launch)
    waited for the device: one sync call, its copy and the idle after it."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host("aten::item", 90, 300)
    _d2h(b, 100, 110, launch=95)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    (g,) = r.findings.syncs
    assert (g.name, g.calls, g.d2h_count, g.idle_ns) == ("aten::item", 1, 1, 290 * US)


def test_a_sync_outside_the_steps_never_counts() -> None:
    """The profiler's synchronize when it stops, after the last step: no sync group."""
    b = Build().step(1, 0, 1000).kernel(0, 900, launch_us=0)
    b.host(V.SYNC_PREFIX + "torch.neuron.synchronize", 1500, 1510, **RUNTIME)
    b.host(V.SYNC_PREFIX + "torch.neuron.synchronize", 950, 960, **RUNTIME)
    r = b.report()
    assert [(g.name, g.calls) for g in r.findings.syncs] == [("torch.neuron.synchronize", 1)]


def test_sync_labels_carry_no_runtime_prefix() -> None:
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host(V.SYNC_PREFIX + "torch.neuron.synchronize", 50, 300, **RUNTIME)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    (f,) = [f for f in r.findings.findings if f.kind.startswith("host_sync")]
    assert f.kind == "host_sync:torch.neuron.synchronize"
    assert f.title == "host sync torch.neuron.synchronize (1 call)"
    assert f.host_op == "torch.neuron.synchronize"


def _fallback(b: Build, start: int, end: int, op: str = "aten::nonzero") -> Build:
    """A fallback as the emulator records it: the op, its dispatch frame, the fallback row,
    its wait for the input copy (a host sync row) and its copies."""
    b.host(op, start, end)
    b.host("PythonSubclass", start + 2, end - 2)
    b.host(
        V.FALLBACK_PREFIX + op,
        start + 5,
        end - 60,
        kind=EventKind.FALLBACK,
        cat=V.CAT_RUNTIME,
        args={V.ARG_EXTERNAL_ID: 77, V.ARG_OP: op},
    )
    b.host(V.SYNC_PREFIX + op, start + 20, start + 40, **RUNTIME)
    for lo, hi, direction in ((start + 10, start + 20, "d2h"), (end - 80, end - 70, "h2d")):
        b.kernel(
            lo,
            hi,
            launch_us=lo - 2,
            kind=EventKind.MEMCPY,
            stream=2,
            name=V.MEMCPY_NAMES[direction],
            args={V.ARG_EXTERNAL_ID: 77, V.ARG_DIRECTION: direction},
        )
    return b


def test_a_fallbacks_own_wait_is_the_fallbacks_and_counted_once() -> None:
    """aten::nonzero falls back: its wait for its copy and the op itself are no sync; the
    idle is the fallback group's alone."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    _fallback(b, 100, 600)
    b.kernel(700, 1000, launch_us=690)
    r = b.report()
    assert r.findings.syncs == ()
    (g,) = r.findings.fallbacks
    assert g.op == "aten::nonzero" and g.calls == 1
    kinds = [f.kind for f in r.findings.findings]
    assert kinds.count("cpu_fallback:aten::nonzero") == 1
    assert not any(k.startswith("host_sync") for k in kinds)


def test_idle_after_a_fallback_up_to_the_next_launch_is_the_fallbacks() -> None:
    """The H2D copy ends at 530 while the host is still in the op (releasing its buffers)
    until 600; the next launch is at 690: the gap 530-700 is the fallback's, not a late
    launch (so is 120-520, between its copies). Recoverable time plus busy time stay within
    the step. (The 10 µs before its D2H copy is a launch gap: shorter than --min-gap.)"""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    _fallback(b, 100, 600)
    b.kernel(700, 1000, launch_us=690)
    r = b.report()
    assert r.idle.by_cause_ns["host_bound_launch"] == 10 * US
    assert r.idle.by_cause_ns["cpu_fallback"] == (520 - 120 + 700 - 530) * US
    (g,) = r.findings.fallbacks
    assert g.idle_ns == r.idle.by_cause_ns["cpu_fallback"]
    (d,) = r.breakdown.devices
    copies = g.d2h_ns + g.h2d_ns
    owned = sum(f.recoverable_ns for f in r.findings.findings)
    assert owned + (d.busy_ns.sum() - copies) <= r.steps.wall_ns.sum()


def test_without_steps_the_window_is_the_users_activity() -> None:
    """No ProfilerStep, stacks recorded: the profiler's __enter__ before the first op and its
    stop (its frames, its synchronize) after the last are outside the analysed window."""
    b = Build()
    b.host(
        "torch/profiler/profiler.py(760): __enter__",
        0,
        400,
        kind=EventKind.PYTHON,
        cat="python_function",
    )
    b.host("aten::empty", 10, 20)  # the profiler's own op, inside its frame
    b.host("aten::mm", 500, 520)
    b.kernel(530, 900, launch_us=510)
    b.host("aten::add", 905, 915)
    b.kernel(920, 1000, launch_us=910)
    b.host(
        "torch/profiler/profiler.py(790): __exit__",
        1100,
        3000,
        kind=EventKind.PYTHON,
        cat="python_function",
    )
    b.host(V.SYNC_PREFIX + "torch.neuron.synchronize", 1200, 2900, **RUNTIME)
    r = b.report(min_gap_us=10)
    assert (r.steps.start_ns.tolist(), r.steps.end_ns.tolist()) == ([500 * US], [1000 * US])
    assert r.findings.syncs == ()
    # what is left: the two late launches inside the window (500-530, 900-920)
    assert [(f.kind, f.recoverable_ns) for f in r.findings.findings] == [
        ("idle:host_bound_launch", 50 * US)
    ]


def test_the_last_step_keeps_the_work_it_queued() -> None:
    """The last step launches three kernels and leaves without a sync: the first starts inside
    its host span, the two queued behind it start after the span. All three are the step's work
    (torch-tb-profiler stretches steps over the work their launches queued, too)."""
    b = Build().step(1, 0, 10_000).kernel(100, 9_100, launch_us=12)
    b.step(2, 10_000, 12_000)
    b.kernel(10_100, 19_100, launch_us=10_012)
    b.kernel(19_100, 22_100, launch_us=10_032)
    b.kernel(22_100, 25_100, launch_us=10_052)
    r = b.report()
    assert r.steps.end_ns.tolist() == [10_000 * US, 25_100 * US]
    # step 2: 15.1 ms wall, busy 10.1-25.1 ms; its idle is the 100 µs before its first kernel
    steps = r.breakdown
    assert steps.wall_ns.tolist() == [10_000 * US, 15_100 * US]
    assert steps.busy_ns[0].tolist() == [9_000 * US, 15_000 * US]


def test_host_activity_is_the_launching_threads() -> None:
    """A monitor thread waits in threading.wait over the whole gap; the launching thread runs
    the op that was late: that op is what the host was running."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host(
        "threading.py(320): wait", 50, 950, kind=EventKind.PYTHON, cat="python_function", tid=999
    )
    b.host("aten::slow_host_op", 120, 380)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    (gap,) = [g for g in r.idle.longest if g.cause == "host_bound_launch"]
    assert gap.host_activity[0] == "aten::slow_host_op"
    assert all("threading" not in name for name in gap.host_activity)
    (f,) = [f for f in r.findings.findings if f.kind == "idle:host_bound_launch"]
    assert f.host_op.startswith("aten::slow_host_op")


def test_advice_follows_what_the_trace_already_does() -> None:
    def late(*extra: str) -> str:
        b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
        for name in extra:
            b.host(name, 100, 110, kind=EventKind.USER_ANNOTATION, cat="user_annotation")
        b.host("aten::slow", 120, 380)
        b.kernel(400, 1000, launch_us=390)
        (f,) = [f for f in b.report().findings.findings if f.kind == "idle:host_bound_launch"]
        return f.suggestion

    assert "torch.compile" in late()
    assert "torch.compile" not in late("Torch-Compiled Region: 0/0")

    def loading(*extra: str) -> str:
        b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
        b.host(V.DATALOADER_PREFIX + extra[0] + V.DATALOADER_SUFFIX, 100, 390)
        for name in extra[1:]:
            b.host(name, 100, 110)
        b.kernel(400, 1000, launch_us=395)
        (f,) = [f for f in b.report().findings.findings if f.kind == "idle:data_loading"]
        return f.suggestion

    assert "num_workers>0" in loading("_SingleProcessDataLoaderIter")
    assert "pin_memory=True" in loading("_SingleProcessDataLoaderIter")
    assert "pin_memory" not in loading("_SingleProcessDataLoaderIter", "aten::pin_memory")
    many = loading("_MultiProcessingDataLoaderIter")
    assert "num_workers>0" not in many and "raise num_workers" in many


def test_work_launched_long_before_it_starts_is_no_late_launch() -> None:
    """The profile opens on a device still busy with work launched before it (not in the
    trace): the next kernel is launched 5 µs into the step but starts at 5,000. The host
    handed it over at 7 µs: the device waited 4,993 µs for something else, not for the host
    ('other'). The second gap (6,000-6,300) is the host's: launched at 6,280, started at 6,300."""
    b = Build().step(1, 0, 7000)
    b.host("aten::mm", 0, 10)
    b.kernel(5000, 6000, launch_us=5)
    b.host("aten::relu", 6270, 6290)
    b.kernel(6300, 7000, launch_us=6280)
    r = b.report()
    assert r.idle.by_cause_ns["other"] == 5000 * US
    assert r.idle.by_cause_ns["host_bound_launch"] == 300 * US
    assert "idle:host_bound_launch" in {f.kind for f in r.findings.findings}
    (longest, *_) = r.idle.longest
    assert (longest.cause, longest.start_ns, longest.end_ns) == ("other", 0, 5000 * US)


def test_rocm_blocking_copy_is_a_sync() -> None:
    """ROCm's .cpu(): c10 issues hipMemcpyWithStream (blocking) where CUDA issues
    cudaMemcpyAsync + cudaStreamSynchronize. The host waits in it from 95 to 400 (its D2H copy
    runs 100-110); the device then idles until the next kernel at 500, launched at 490: the gap
    (110-500) begins in the sync: host_sync, 390 µs, not a late launch."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host("aten::_to_copy", 90, 405)
    b.host("hipMemcpyWithStream", 95, 400, **RUNTIME)
    _d2h(b, 100, 110, launch=95)
    b.kernel(500, 1000, launch_us=490)
    r = b.report()
    assert r.idle.by_cause_ns["host_sync"] == 390 * US
    assert r.idle.by_cause_ns["host_bound_launch"] == 0


def test_xpu_runtime_rows_link_their_kernels(tmp_path) -> None:  # noqa: ANN001
    """Kineto's XPU categories (xpu_runtime): the launch of the kernel at 500 (urEnqueueKernel
    Launch at 480-485, correlation 2) is the host's late launch: host_bound_launch 400 µs
    (100-500), plus the first kernel's 5 (0-5, launched at 2); unlinked it was 'other'."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.trace import load_trace

    def x(name, cat, ts, dur, **args):  # noqa: ANN001, ANN003, ANN202
        pid, tid = (0, 7) if cat == "kernel" else (1, 1)
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    events = [
        x("ProfilerStep#1", "user_annotation", 0, 1000),
        x("aten::mm", "cpu_op", 0, 10),
        x("urEnqueueKernelLaunch", "xpu_runtime", 2, 3, correlation=1),
        x("gemm", "kernel", 5, 95, correlation=1, device=0, stream=7),
        x("aten::mm", "cpu_op", 478, 10),
        x("urEnqueueKernelLaunch", "xpu_runtime", 480, 5, correlation=2),
        x("gemm", "kernel", 500, 500, correlation=2, device=0, stream=7),
    ]
    path = tmp_path / "xpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = analyze(load_trace(path))
    assert r.idle.by_cause_ns["host_bound_launch"] == 405 * US
    assert r.idle.by_cause_ns["other"] == 0


def test_overhead_reach_figures_are_bounded() -> None:
    """An emulator-overhead row's 'overhead before (ns)' of 10^12 (hostile: the emulator writes
    µs) reaches back 10 ms at most: step 0-100,000 µs, kernels 0-10,000 and 90,000-100,000
    (launched at 89,990), the row at 50,000-51,000: 11,000 µs discounted, the rest of the
    80,000 µs gap the late launch's."""
    b = Build().step(1, 0, 100_000).kernel(0, 10_000, launch_us=0)
    b.host(
        V.OVERHEAD_PREFIX + "dispatch",
        50_000,
        51_000,
        args={V.ARG_OVERHEAD: "dispatch", V.ARG_OVERHEAD_BEFORE: 10**12},
    )
    b.kernel(90_000, 100_000, launch_us=89_990)
    r = b.report()
    assert r.idle.emulator_overhead_ns == 11_000 * US
    assert r.idle.by_cause_ns["host_bound_launch"] == 69_000 * US


def test_mtia_stream_waits_are_idle_and_dma_requests_copies(tmp_path) -> None:  # noqa: ANN001
    """MTIA's device rows share one category (mtia_ccp_events): stream 108 waits in event_wait
    from 300 to 900 µs while nothing runs (idle, as CUDA's stream waits leave no row); a
    dma_request is a copy. Step 0-1,000: pe_exe 0-300 and 900-1,000, dma_request 100-150:
    busy 400, DMA 50, idle 600."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.trace import load_trace

    def x(name, ts, dur, stream, pid=17, cat="mtia_ccp_events"):  # noqa: ANN001, ANN202
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"stream": stream},
        }

    events = [
        x("ProfilerStep#1", 0, 1000, 1, pid=1, cat="user_annotation"),
        x("pe_exe", 0, 300, 105),
        x("dma_request", 100, 50, 106),
        x("event_wait", 300, 600, 108),
        x("pe_exe", 900, 100, 105),
    ]
    path = tmp_path / "mtia.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = analyze(load_trace(path))
    (device,) = r.idle.devices
    assert (device.busy_ns, device.idle_ns) == (400 * US, 600 * US)
    assert r.breakdown.devices[0].dma_ns[0] == 50 * US


def test_a_gap_across_the_hole_between_steps_is_judged_inside_the_steps() -> None:
    """Step 1 (0-1,000 µs) ends its work at 900; step 2 opens 4 ms later (5,000-6,000) in a
    DataLoader ``__next__`` (5,000-5,400), then launches at 5,400 a kernel that starts at
    5,410. The gap 900-5,410 is kept whole; its counted idle is 100 + 410 = 510 µs, of which
    the DataLoader covers 400 (> half): data loading, although 400 µs is under half of the gap's
    whole 4,510. The host spent the gap's idle time loading data, not launching late."""
    b = Build().step(1, 0, 1000).kernel(0, 900, launch_us=0)
    b.step(5, 5000, 6000)
    b.host(V.DATALOADER_PREFIX + "_SingleProcessDataLoaderIter" + V.DATALOADER_SUFFIX, 5000, 5400)
    b.kernel(5410, 6000, launch_us=5400)
    r = b.report()
    assert r.idle.by_cause_ns["data_loading"] == 510 * US
    assert r.idle.by_cause_ns["host_bound_launch"] == 0


def test_what_the_host_did_between_steps_does_not_own_the_gap() -> None:
    """The same hole, a DataLoader ``__next__`` in it (1,000-4,900, outside both steps), step
    2 launching at 5,300 a kernel that starts at 5,310: of the gap's 410 µs counted idle (100 +
    310) the DataLoader covers none; the launch began after the gap and the kernel started
    8 µs after the call returned (5,302): 410 µs host-bound launch, no data loading."""
    b = Build().step(1, 0, 1000).kernel(0, 900, launch_us=0)
    b.step(5, 5000, 6000)
    b.host(V.DATALOADER_PREFIX + "_SingleProcessDataLoaderIter" + V.DATALOADER_SUFFIX, 1000, 4900)
    b.kernel(5310, 6000, launch_us=5300)
    r = b.report()
    assert r.idle.by_cause_ns["data_loading"] == 0
    assert r.idle.by_cause_ns["host_bound_launch"] == 410 * US


def test_a_late_launch_is_judged_on_the_gaps_counted_idle() -> None:
    """The hole again, nothing in it; step 2 launches at 5,010 (returns 5,012) a kernel that
    starts only at 5,800. Counted idle 100 + 800 = 900 µs; after the call returned the device
    still waited 788 µs (> half of 900, > 100 µs of launch latency): it waited for something
    else, not the host ('other'). Judged on the whole gap (4,900 µs) its midpoint lies between
    the steps and every launch in step 2 would pass."""
    b = Build().step(1, 0, 1000).kernel(0, 900, launch_us=0)
    b.step(5, 5000, 6000)
    b.kernel(5800, 6000, launch_us=5010)
    r = b.report()
    assert r.idle.by_cause_ns["other"] == 900 * US
    assert r.idle.by_cause_ns["host_bound_launch"] == 0


LOADER = V.DATALOADER_PREFIX + "_SingleProcessDataLoaderIter" + V.DATALOADER_SUFFIX


def test_a_dataloader_on_a_thread_that_launches_nothing_owns_no_gap() -> None:
    """A prefetch thread (tid 200) sits in DataLoader ``__next__`` 100-390 µs while the
    launching thread runs a slow host op (120-380) and launches the next kernel late (390, it
    starts at 400): the gap 100-400 (300 µs) is the launching thread's late launch; the
    prefetch kept no launch waiting."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host(LOADER, 100, 390, tid=200)
    b.host("aten::slow_host_op", 120, 380)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    assert r.idle.by_cause_ns["data_loading"] == 0
    assert r.idle.by_cause_ns["host_bound_launch"] == 300 * US


def test_each_device_is_judged_on_the_threads_that_launch_its_work() -> None:
    """Thread 100 drives device 0 and waits in its DataLoader 100-390 µs; thread 101 drives
    device 1 and runs a slow op 120-380. Both devices idle 100-400 (300 µs): device 0 waits for
    data, device 1 for its host's late launch (not for thread 100's DataLoader)."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0).kernel(0, 100, device=1, launch_us=1, tid=101)
    b.host(LOADER, 100, 390)
    b.host("aten::slow_host_op", 120, 380, tid=101)
    b.kernel(400, 1000, launch_us=395)
    b.kernel(400, 1000, device=1, launch_us=390, tid=101)
    r = b.report()
    by = {d.device: d.by_cause_ns for d in r.idle.devices}
    assert (by[0]["data_loading"], by[0]["host_bound_launch"]) == (300 * US, 0)
    assert (by[1]["data_loading"], by[1]["host_bound_launch"]) == (0, 300 * US)


def test_a_sync_on_a_thread_that_launches_nothing_is_not_the_gaps() -> None:
    """A side thread (tid 300) waits in cudaEventSynchronize 90-300 µs; the launching thread
    is in a slow op 110-380 and launches at 390 (kernel at 400). The gap 100-400 began in the
    side thread's sync, but that sync held no launch back: 300 µs host-bound launch, no host
    sync idle."""
    b = Build().step(1, 0, 1000).kernel(0, 100, launch_us=0)
    b.host("cudaEventSynchronize", 90, 300, kind=EventKind.RUNTIME, cat="cuda_runtime", tid=300)
    b.host("aten::slow_host_op", 110, 380)
    b.kernel(400, 1000, launch_us=390)
    r = b.report()
    assert r.idle.by_cause_ns["host_sync"] == 0
    assert r.idle.by_cause_ns["host_bound_launch"] == 300 * US


def test_a_device_without_linked_launches_is_judged_on_every_thread() -> None:
    """Device 0's work has no launch rows (nothing says which thread launched it): the
    DataLoader on thread 200 (100-390) still covers its gap 100-400 (data loading, 300 µs),
    whatever device 1, launched by thread 100, does beside it."""
    b = Build().step(1, 0, 1000).kernel(0, 100).kernel(0, 1000, device=1, launch_us=0)
    b.host(LOADER, 100, 390, tid=200)
    b.kernel(400, 1000)
    r = b.report()
    by = {d.device: d.by_cause_ns for d in r.idle.devices}
    assert by[0]["data_loading"] == 300 * US
