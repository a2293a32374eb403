"""The device timeline without torch: stream order between compute and DMA, collectives on their
own queue, real host waits, and each launch's runtime call + device event pair."""

from __future__ import annotations

import json
import time

from neuron_profiler.emulator.chips import chip
from neuron_profiler.emulator.runtime import EmulatedRuntime
from neuron_profiler.emulator.scheduler import DeviceTimeline, wait_until
from neuron_profiler.emulator.timing import RooflineModel
from neuron_profiler.runtime_trace import format as F


def _timeline(speed: float = 1.0) -> DeviceTimeline:
    rt = EmulatedRuntime(cores=2)
    return DeviceTimeline(rt, RooflineModel(chip("trn2"), speed_factor=speed), cores=2)


def test_compute_and_dma_are_stream_ordered_collectives_overlap() -> None:
    tl = _timeline()
    lat = chip("trn2").launch_latency_ns
    t0 = time.time_ns() + 10_000_000
    copy_end = tl.copy(0, F.H2D, 64 << 20, launch_ns=t0, op="aten::copy_")
    k_end = tl.kernel(0, "aten::add", flops=10, bytes_moved=10, dtype="float32", matrix=False,
                      launch_ns=t0 + 1)
    assert copy_end - (t0 + lat) == tl.model.host_copy_ns(64 << 20)
    assert k_end == copy_end + tl.model.kernel_ns(flops=10, bytes_moved=10, dtype="float32",
                                                  matrix=False)
    cc_end = tl.collective(0, "c10d::allreduce_", collective="allreduce", nbytes=1 << 30,
                           ranks=[0, 1], group="0", launch_ns=t0 + 2)
    k2_end = tl.kernel(0, "aten::mul", flops=10, bytes_moved=10, dtype="float32", matrix=False,
                       launch_ns=t0 + 3)
    assert cc_end > k2_end > k_end  # compute after the collective did not wait for it
    assert tl.busy_until_ns([0]) == cc_end and tl.busy_until_ns([1]) == 0
    k3_end = tl.kernel(0, "aten::mul", flops=10, bytes_moved=10, dtype="float32", matrix=False,
                       launch_ns=t0 + 4, not_before_ns=cc_end)  # reads the collective's output
    assert k3_end > cc_end


def test_host_sync_really_waits_and_launches_record_linked_pairs() -> None:
    tl = _timeline(speed=1e-4)
    rt = tl.rt
    rt.sys_trace_start()
    launch = time.time_ns()
    end = tl.kernel(1, "aten::mm", flops=2 * 64**3, bytes_moved=3 * 64 * 64 * 4, dtype="float32",
                    matrix=True, launch_ns=launch)
    assert end - launch > 10_000_000  # > 10 ms of modelled device time at this speed
    returned = tl.host_sync([1], "synchronize")
    assert returned >= end and time.time_ns() >= end
    rt.sys_trace_stop()
    events = json.loads(rt.sys_trace_fetch())["events"]
    starts = {e["event_type"]: e for e in events if e["phase"] == F.START}
    call, work, sync = starts[F.NRT_MODEL_SUBMIT], starts[F.NC_EXEC_RUNNING], \
        starts[F.EXT_HOST_SYNC]
    assert _exec(call) == _exec(work)
    assert call["timestamp_ns"] == launch == work["data"][F.EXT_KEY][F.X_LAUNCH_NS]
    assert work["timestamp_ns"] == work["data"]["nc_timestamp_ns"]  # the device clock ...
    assert rt.nc_timestamp_ns(launch + chip("trn2").launch_latency_ns, 1) == work["timestamp_ns"]
    assert work["data"][F.EXT_KEY][F.X_FLOPS] == 2 * 64**3 and work["nc_idx"] == 1
    assert sync["data"][F.EXT_KEY][F.X_WAIT_UNTIL_NS] == end


def test_wait_until_reaches_the_target() -> None:
    target = time.time_ns() + 2_000_000
    assert wait_until(target) >= target and time.time_ns() >= target


def _exec(event: dict) -> int:
    """The exec id of an emulated event: real key on device events, our extension's on the
    host calls and copies (the real runtime writes it on kbl_exec_* stages instead)."""
    data = event["data"]
    return data["exec_id"] if "exec_id" in data else data["neuron_profiler"]["exec_id"]
