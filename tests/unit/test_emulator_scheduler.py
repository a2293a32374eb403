"""The device timeline without torch: stream order between compute and DMA, collectives on their
own queue, real host waits, and each launch's runtime call + device event pair."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from neuron_profiler.costmodel.chips import chip
from neuron_profiler.emulator.runtime import EmulatedRuntime
from neuron_profiler.emulator.scheduler import DeviceTimeline, wait_until
from neuron_profiler.emulator.timing import RooflineModel
from neuron_profiler.runtime_trace import format as F


class Arrivals:
    """A fake arrival exchange (scheduler.ArrivalExchange) and what starts it
    (``launch_collective``'s ``exchange``): the other ranks sent ``others`` as their latest
    ready time (or ``others(ready)``, from this rank's) and ``chained`` as their longest chained
    duration (-1: none); ``done`` says whether they all have (else ``latest`` blocks for
    ``block_s``, as a late rank would make it). ``sent``: what this rank sent."""

    def __init__(
        self,
        others: int | Callable[[int], int],
        done: bool = False,
        block_s: float = 0.0,
        chained: int = -1,
    ) -> None:
        self.others, self.chained, self.done, self.block_s = others, chained, done, block_s
        self.waited, self.sent = 0, (0, -1)

    def __call__(self, ready_ns: int, chained_ns: int) -> Arrivals:
        self.sent = (ready_ns, chained_ns)
        return self

    def is_completed(self) -> bool:
        return self.done

    def latest(self) -> tuple[int, int]:
        self.waited += 1
        if not self.done:
            time.sleep(self.block_s)
            self.done = True
        ready, chained = self.sent
        others = self.others(ready) if callable(self.others) else self.others
        return max(ready, others), max(chained, self.chained)


def _timeline(speed: float = 1.0) -> DeviceTimeline:
    rt = EmulatedRuntime(cores=2)
    return DeviceTimeline(rt, RooflineModel(chip("trn2"), speed_factor=speed), cores=2)


def test_compute_and_dma_are_stream_ordered_collectives_overlap() -> None:
    tl = _timeline()
    lat = chip("trn2").launch_latency_ns
    t0 = time.time_ns() + 10_000_000
    copy_end = tl.copy(0, F.H2D, 64 << 20, launch_ns=t0, op="aten::copy_")
    k_end = tl.kernel(
        0, "aten::add", flops=10, bytes_moved=10, dtype="float32", matrix=False, launch_ns=t0 + 1
    )
    assert copy_end - (t0 + lat) == tl.model.host_copy_ns(64 << 20)
    assert k_end == copy_end + tl.model.kernel_ns(
        flops=10, bytes_moved=10, dtype="float32", matrix=False
    )
    cc_end = tl.collective(
        0,
        "c10d::allreduce_",
        collective="allreduce",
        nbytes=1 << 30,
        ranks=[0, 1],
        group="0",
        launch_ns=t0 + 2,
    )
    k2_end = tl.kernel(
        0, "aten::mul", flops=10, bytes_moved=10, dtype="float32", matrix=False, launch_ns=t0 + 3
    )
    assert cc_end > k2_end > k_end  # compute after the collective did not wait for it
    assert tl.busy_until_ns([0]) == cc_end and tl.busy_until_ns([1]) == 0
    k3_end = tl.kernel(
        0,
        "aten::mul",
        flops=10,
        bytes_moved=10,
        dtype="float32",
        matrix=False,
        launch_ns=t0 + 4,
        not_before_ns=cc_end,
    )  # reads the collective's output
    assert k3_end > cc_end


def test_host_sync_really_waits_and_launches_record_linked_pairs() -> None:
    tl = _timeline(speed=1e-4)
    rt = tl.rt
    rt.sys_trace_start()
    launch = time.time_ns()
    end = tl.kernel(
        1,
        "aten::mm",
        flops=2 * 64**3,
        bytes_moved=3 * 64 * 64 * 4,
        dtype="float32",
        matrix=True,
        launch_ns=launch,
    )
    assert end - launch > 10_000_000  # > 10 ms of modelled device time at this speed
    returned = tl.host_sync([1], "synchronize")
    assert returned >= end and time.time_ns() >= end
    rt.sys_trace_stop()
    events = json.loads(rt.sys_trace_fetch())["events"]
    starts = {e["event_type"]: e for e in events if e["phase"] == F.START}
    call, work, sync = (
        starts[F.NRT_MODEL_SUBMIT],
        starts[F.NC_EXEC_RUNNING],
        starts[F.EXT_HOST_SYNC],
    )
    assert _exec(call) == _exec(work)
    assert call["timestamp_ns"] == launch == work["data"][F.EXT_KEY][F.X_LAUNCH_NS]
    assert work["timestamp_ns"] == work["data"]["nc_timestamp_ns"]  # the device clock ...
    assert rt.nc_timestamp_ns(launch + chip("trn2").launch_latency_ns, 1) == work["timestamp_ns"]
    assert work["data"][F.EXT_KEY][F.X_FLOPS] == 2 * 64**3 and work["nc_idx"] == 1
    assert sync["data"][F.EXT_KEY][F.X_WAIT_UNTIL_NS] == end


def test_a_pageable_copy_is_submitted_when_the_host_has_staged_it() -> None:
    """Host -> device from pageable memory: the host stages 8 MiB for at least 838,861 ns
    (8,388,608 B at 10 GB/s, really waited), the runtime call's row spans the staging, and the
    DMA starts at the staging's end plus the launch latency and lasts 526,288 ns (8 MiB at the
    16 GB/s host link per trn2 logical core, plus the 2 µs fixed DMA time)."""
    tl = _timeline()
    rt = tl.rt
    rt.sys_trace_start()
    nbytes, lat = 8 << 20, chip("trn2").launch_latency_ns
    t0 = time.time_ns()
    staged = tl.stage(nbytes, since_ns=t0)
    assert staged - t0 >= 838_861 and time.time_ns() >= staged
    end = tl.copy(0, F.H2D, nbytes, launch_ns=t0, op="aten::_to_copy", staged_ns=staged)
    dma = tl.model.host_copy_ns(nbytes)
    assert abs(dma - 526_288) <= 1  # rounded up from a float
    assert end == staged + lat + dma
    rt.sys_trace_stop()
    events = json.loads(rt.sys_trace_fetch())["events"]
    by = {(e["event_type"], e["phase"]): e for e in events}
    call_start = by[(F.NRT_TENSOR_WRITE, F.START)]["timestamp_ns"]
    call_stop = by[(F.NRT_TENSOR_WRITE, F.STOP)]["timestamp_ns"]
    work = by[(F.DMEM_BUF_COPYIN, F.START)]
    assert (call_start, call_stop) == (t0, staged)
    assert rt.nc_timestamp_ns(staged + lat, 0) == work["timestamp_ns"]
    assert work["data"][F.EXT_KEY][F.X_LAUNCH_NS] == t0  # launched by the call that staged it


def test_wait_until_reaches_the_target() -> None:
    target = time.time_ns() + 2_000_000
    assert wait_until(target) >= target and time.time_ns() >= target


def _exec(event: dict) -> int:
    """The exec id of an emulated event: real key on device events, our extension's on the
    host calls and copies (the real runtime writes it on kbl_exec_* stages instead)."""
    data = event["data"]
    return data["exec_id"] if "exec_id" in data else data["neuron_profiler"]["exec_id"]


def test_recorded_events_are_named_records_outside_the_garbage_collector() -> None:
    """Every kind of record the hot path stores (a launch of each queue, a host sync, an
    overhead span, tensor instants) is a named record the collector never traverses: a ring can
    hold a million of them."""
    import gc
    from collections import Counter

    from neuron_profiler.emulator.runtime import RecordedEvent
    from neuron_profiler.emulator.scheduler import GraphExecution, GraphOp, LaunchRecord

    tl = _timeline()
    tl.rt.sys_trace_start()
    t0 = time.time_ns()
    tl.kernel(
        0,
        "aten::mm",
        flops=2 << 20,
        bytes_moved=3 << 12,
        dtype="float32",
        matrix=True,
        launch_ns=t0,
        overhead_from_ns=t0 - 1_000,
    )
    graph = GraphExecution(7, 5_000, (GraphOp("aten::sin", 0, 5_000, 10, 20, "ScalarE"),))
    tl.kernel(
        0,
        "neuron_graph_7 (forward)",
        flops=10,
        bytes_moved=20,
        dtype="float32",
        matrix=False,
        launch_ns=t0,
        graph=graph,
    )
    tl.copy(0, F.H2D, 1024, launch_ns=t0, op="aten::_to_copy")
    tl.collective(
        0,
        "c10d::allreduce_",
        collective="allreduce",
        nbytes=1024,
        ranks=[0, 1],
        group="0",
        launch_ns=t0,
        exchange=Arrivals(lambda ready: ready + 50_000),
    )
    tl.host_sync([0], "item", until_ns=time.time_ns())
    tl.free(0, tl.allocate(0, 64), 64)
    events = list(tl.rt._buffers[0])
    assert all(type(e) is RecordedEvent for e in events)
    payloads = [e.payload for e in events]
    kinds = Counter(type(p).__name__ for p in payloads)
    assert kinds == {
        "LaunchRecord": 16,  # 4 launches x (call start/stop, work start/stop)
        "OverheadRecord": 4,  # numerics and collective coupling spans
        "BarrierRecord": 2,
        "HostSyncRecord": 2,
        "TensorRecord": 2,
    }, kinds
    assert {type(p.detail).__name__ for p in payloads if type(p) is LaunchRecord} == {
        "KernelDetail",
        "CopyDetail",
        "CollectiveDetail",
    }
    assert not any(gc.is_tracked(x) for x in events + payloads), "records tracked by the GC"
    body = json.loads(tl.rt.sys_trace_fetch())
    graph_ext = next(
        e["data"][F.EXT_KEY]
        for e in body["events"]
        if e["data"].get(F.EXT_KEY, {}).get(F.X_GRAPH_ID) == 7
    )
    assert graph_ext[F.X_GRAPH_OPS] == [
        {
            F.X_OP: "aten::sin",
            F.X_OFFSET_NS: 0,
            F.X_DURATION_NS: 5_000,
            F.X_FLOPS: 10,
            F.X_BYTES: 20,
            F.X_ENGINE: "ScalarE",
        }
    ]


def _cc(tl: DeviceTimeline, launch_ns: int, exchange, core: int = 0, group: str = "0"):
    return tl.launch_collective(
        core,
        "c10d::allreduce_",
        collective="allreduce",
        nbytes=1 << 20,
        ranks=[0, 1],
        group=group,
        launch_ns=launch_ns,
        exchange=exchange,
    )


def _add(tl: DeviceTimeline, launch_ns: int, not_before_ns: int = 0) -> int:
    return tl.kernel(
        0,
        "aten::add",
        flops=10,
        bytes_moved=10,
        dtype="float32",
        matrix=False,
        launch_ns=launch_ns,
        not_before_ns=not_before_ns,
    )


def test_a_coupled_collective_launch_returns_at_once_and_resolves_when_its_end_is_needed() -> None:
    """The launch starts the exchange and goes on; compute launched after it is scheduled
    without it; reading its end resolves it from the group's latest arrival, and the events
    recorded then are those of the launch (its call span, thread, ids) plus the device wait."""
    tl = _timeline()
    lat = chip("trn2").launch_latency_ns
    tl.rt.sys_trace_start()
    t0 = time.time_ns()
    late = t0 + 30_000_000  # the last rank arrives 30 ms after this one
    exchange = Arrivals(late, block_s=0.02)
    pending = _cc(tl, t0, exchange)
    assert not pending.resolved and exchange.waited == 0  # the launch did not wait
    k_end = _add(tl, t0 + 1)
    assert not pending.resolved and k_end < late  # independent compute: scheduled at once
    begin = time.time_ns()
    end = pending.end_ns()  # a reader of its output
    blocked = time.time_ns() - begin
    assert exchange.waited == 1 and blocked >= 15_000_000
    dur = tl.model.collective_ns(nbytes=1 << 20, world=2, collective="allreduce")
    assert pending.start == late and end == late + dur  # starts when the last rank arrived
    assert pending.end_ns() == end and exchange.waited == 1  # resolved once
    assert _add(tl, time.time_ns(), not_before_ns=end) > end
    tl.rt.sys_trace_stop()
    events = json.loads(tl.rt.sys_trace_fetch())["events"]
    by_type: dict[str, list[dict]] = {}
    for e in events:
        by_type.setdefault(e["event_type"], []).append(e)
    barrier = [e for e in by_type[F.CC_EXEC_BARRIER] if e["phase"] == F.START]
    assert len(barrier) == 1
    assert barrier[0]["data"]["nc_timestamp_ns"] + tl.rt.nc_epoch_of(0) == t0 + lat
    running = {e["phase"]: e for e in by_type[F.CC_RUNNING]}
    assert running[F.START]["data"]["nc_timestamp_ns"] + tl.rt.nc_epoch_of(0) == late
    assert running[F.START]["data"]["op_id"] == 1
    calls = [e for e in by_type[F.NRT_MODEL_SUBMIT] if e["phase"] == F.START]
    cc_call = next(e for e in calls if e["data"][F.EXT_KEY][F.X_OP] == "c10d::allreduce_")
    assert cc_call["timestamp_ns"] == t0  # the launch's call, not the resolution's
    add_call = next(e for e in calls if e["data"][F.EXT_KEY][F.X_OP] == "aten::add")
    assert cc_call["data"][F.EXT_KEY][F.X_EXEC_ID] < add_call["data"][F.EXT_KEY][F.X_EXEC_ID]
    coupling = [
        e
        for e in by_type[F.EXT_EMULATOR_OVERHEAD]
        if e["phase"] == F.START and e["data"][F.EXT_KEY][F.X_OVERHEAD] == F.OVERHEAD_COUPLING
    ]
    assert len(coupling) == 1 and coupling[0]["timestamp_ns"] >= begin  # the block alone


def test_pending_collectives_resolve_in_order_and_before_a_capture_stops() -> None:
    """A collective of the same group queues behind a pending one without resolving it; one of
    another group on the core, a host sync and a capture's stop need the pending ones' ends:
    each resolves them, in launch order. An exchange already complete costs no overhead span."""
    tl = _timeline()
    tl.rt.sys_trace_start()
    t0 = time.time_ns()
    first = _cc(tl, t0, Arrivals(t0 + 1_000_000, done=True))
    second = _cc(tl, t0 + 1, Arrivals(t0 + 2_000_000, done=True))
    assert not first.resolved and not second.resolved  # chained behind the first
    other = _cc(tl, t0 + 2, Arrivals(t0 + 3_000_000, done=True), group="1")
    assert first.resolved and second.resolved and not other.resolved  # its queue time: theirs
    assert second.arrival_ns == first.end and second.start == t0 + 2_000_000  # the peer's
    assert other.arrival_ns == second.end
    assert tl.busy_until_ns([0]) == other.end_ns() and other.resolved  # a host sync
    third = _cc(tl, time.time_ns(), Arrivals(lambda ready: ready, done=True))
    assert not third.resolved
    tl.rt.sys_trace_stop()  # the capture's stop resolves it: its events are in the capture
    assert third.resolved
    events = json.loads(tl.rt.sys_trace_fetch())["events"]
    ops = [
        e["data"]["op_id"]
        for e in events
        if e["event_type"] == F.CC_RUNNING and e["phase"] == F.START
    ]
    assert sorted(ops) == [1, 2, 3, 4]
    assert not [e for e in events if e["event_type"] == F.EXT_EMULATOR_OVERHEAD]  # no block


def _comparable(tl: DeviceTimeline) -> list[tuple]:
    """A capture's events on the host clock (device stamps plus the core's epoch), without what
    is the host's own time (the emulator's overhead spans, where a runtime call returned) or the
    order they were recorded in (ids)."""
    out = []
    for e in json.loads(tl.rt.sys_trace_fetch())["events"]:
        if e["event_type"] == F.EXT_EMULATOR_OVERHEAD:
            continue
        stamp, data = e["timestamp_ns"], e["data"]
        if "nc_timestamp_ns" in data:
            epoch = tl.rt.nc_epoch_of(data.get("device_core_idx", 0))
            stamp, data = (
                stamp + epoch,
                {**data, "nc_timestamp_ns": data["nc_timestamp_ns"] + epoch},
            )
        if e["event_type"] == F.NRT_MODEL_SUBMIT and e["phase"] == F.STOP:
            stamp = None
        out.append((e["event_type"], e["phase"], stamp, json.dumps(data, sort_keys=True)))
    return sorted(out, key=repr)


def test_a_collective_launched_behind_a_pending_one_is_placed_as_if_that_one_were_resolved() -> (
    None
):
    """Injected truth: the other rank arrives 30 ms late for the first all_reduce and launches
    the second 2 us after this rank's. Resolved eagerly (the first resolved before the second
    is launched, as the launch used to do), the second's arrival is after the first's end;
    chained (the first still pending, the late rank's arrival not known), the launch returns
    without waiting, and resolving the second (which resolves the first) gives the same device
    times and events. By hand: the first runs from the late arrival for its duration, the second
    from its end (later than both ranks' launches plus the latency)."""
    lat = chip("trn2").launch_latency_ns
    t0 = time.time_ns()
    late, peer_second = t0 + 30_000_000, t0 + 2_000 + lat
    placed = {}
    for mode in ("eager", "chained"):
        tl = _timeline()
        dur = tl.model.collective_ns(nbytes=1 << 20, world=2, collective="allreduce")
        tl.rt.sys_trace_start()
        first_x = Arrivals(late, block_s=0.01)
        first = _cc(tl, t0, first_x)
        if mode == "eager":  # the peer resolved it too: it sends its arrival after the end
            first.end_ns()
            second_x = Arrivals(max(peer_second, first.end))
        else:  # the peer chained it too: it sends its ready time and the first's duration
            second_x = Arrivals(peer_second, chained=dur)
        second = _cc(tl, t0 + 1_000, second_x)
        if mode == "chained":
            assert not first.resolved and first_x.waited == 0  # the launch did not wait
            assert second_x.sent == (t0 + 1_000 + lat, dur)
        end = second.end_ns()
        assert first.resolved and first_x.waited == 1
        tl.rt.sys_trace_stop()
        placed[mode] = (
            [(c.arrival_ns, c.start, c.end) for c in (first, second)],
            _comparable(tl),
        )
        assert first.arrival_ns == t0 + lat and (first.start, first.end) == (late, late + dur)
        assert second.arrival_ns == second.start == late + dur and end == late + 2 * dur
    assert placed["chained"] == placed["eager"]
    times, events = placed["chained"]
    barriers = [e for e in events if e[0] == F.CC_EXEC_BARRIER]
    assert len(barriers) == 2 and [e[2] for e in barriers] == [t0 + lat, late]  # first only


def test_a_peer_chained_behind_the_previous_collective_delays_the_group_start() -> None:
    """This rank resolved the first collective before launching the second; the other rank did
    not, and its first collective lasts 5 ms longer (its own bytes): it sends its ready time and
    that duration. The group starts the second when the peer's first ends: the first's group
    start plus the peer's duration."""
    tl = _timeline()
    t0 = time.time_ns()
    first = _cc(tl, t0, Arrivals(t0 + 1_000_000, done=True))
    first.end_ns()
    dur = first.end - first.start
    peer = dur + 5_000_000
    second_x = Arrivals(t0 + 2_000, done=True, chained=peer)
    second = _cc(tl, t0 + 1_000, second_x)
    assert second_x.sent == (first.end, -1)  # resolved: its end is in this rank's ready time
    assert second.end_ns() == t0 + 1_000_000 + peer + dur
    assert second.arrival_ns == first.end and second.start == t0 + 1_000_000 + peer


def test_a_full_launch_queue_resolves_the_pending_collectives() -> None:
    """Pending collectives count as in flight; the launch that finds the queue full resolves
    them first (their ends are when the queue frees)."""
    rt = EmulatedRuntime(cores=1)
    tl = DeviceTimeline(rt, RooflineModel(chip("trn2")), cores=1, queue_depth=2)
    t0 = time.time_ns()
    pending = _cc(tl, t0, Arrivals(lambda ready: ready, done=True))
    _add(tl, t0)
    assert not pending.resolved
    _add(tl, t0)  # two in flight: this launch waits for the queue
    assert pending.resolved
    tl = DeviceTimeline(rt, RooflineModel(chip("trn2")), cores=1, queue_depth=2)
    first = _cc(tl, t0, Arrivals(lambda ready: ready, done=True))
    second = _cc(tl, t0, Arrivals(lambda ready: ready, done=True))
    assert not first.resolved and not second.resolved  # chained: two in flight
    _add(tl, t0)
    assert first.resolved and second.resolved and second.start == first.end
