"""Collectives occupy the collective queue, overlap later compute, and delay only the work (and
host waits) that need their result. One-process gloo group, so it runs inside pytest."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = pytest.mark.torch
SPEED = 1e-4  # a 50 ms collective: later launches land inside it even on a loaded host


@pytest.fixture
def group():
    emu.enable(cores=2, speed_factor=SPEED)
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()
    emu.enable(cores=2, speed_factor=1.0)


def _spans(events: list[dict]) -> list[dict]:
    opened, out = {}, []
    for e in events:
        key = (e["event_type"], e.get("tracking_id"))
        if e["phase"] == F.START:
            opened[key] = e
        elif e["phase"] == F.STOP:
            start = opened.pop(key)
            ext = start["data"].get(F.EXT_KEY, {})
            out.append(
                {
                    "type": e["event_type"],
                    "start": start["timestamp_ns"],
                    "end": e["timestamp_ns"],
                    "op": ext.get(F.X_OP),
                    "ext": ext,
                }
            )
    return out


def test_collective_overlaps_compute_and_gates_its_consumers(group) -> None:
    grads = torch.ones(256, device="neuron")
    other = torch.randn(64, 64, device="neuron")
    torch.neuron.synchronize()
    rt = get_runtime()
    rt.sys_trace_start()
    work = dist.all_reduce(grads, async_op=True)
    independent = other @ other  # does not read the collective's output
    consumer = grads * 2  # reads it: must wait on the device
    work.wait()  # as NCCL: the current stream waits on the device, the host goes on
    after = other + 1  # launched after the wait, reads nothing the collective writes
    total = consumer.sum().item()
    rt.sys_trace_stop()
    assert total == 512.0 and independent.shape == after.shape == (64, 64)
    spans = _spans(json.loads(rt.sys_trace_fetch())["events"])
    (cc,) = [s for s in spans if s["type"] == F.CC_RUNNING]
    assert cc["ext"][F.X_COLLECTIVE_OP] == "allreduce" and cc["ext"][F.X_RANKS] == [0]
    assert cc["ext"][F.X_BYTES] == 256 * 4
    # world of one: a single ring step of the chip's documented latency, scaled
    assert cc["end"] - cc["start"] >= chip("trn2").collective_step_latency_ns / SPEED
    kernels = {s["op"]: s for s in spans if s["type"] == F.NC_EXEC_RUNNING}
    mm, mul = kernels["aten::mm"], kernels["aten::mul"]
    assert mm["start"] < cc["end"]  # compute overlapped the collective
    assert mul["start"] >= cc["end"]  # the consumer waited for it
    assert kernels["aten::add"]["start"] >= cc["end"]  # the stream waited for it
    syncs = [s for s in spans if s["type"] == F.EXT_HOST_SYNC]
    reasons = [s["ext"][F.X_SYNC_REASON] for s in syncs]
    assert reasons and "collective_wait" not in reasons  # the host waited at .item(), not wait()
    assert max(s["end"] for s in syncs) >= cc["end"]


def test_wait_on_a_side_stream_leaves_the_default_stream_computing(group) -> None:
    """FSDP's pattern: the collective and its wait on a side stream, an event recorded there,
    the default stream waiting for that event only where it needs the result."""
    grads = torch.ones(256, device="neuron")
    other = torch.randn(64, 64, device="neuron")
    side = torch.neuron.Stream()
    torch.neuron.synchronize()
    rt = get_runtime()
    rt.sys_trace_start()
    with torch.neuron.stream(side):
        assert torch.neuron.current_stream() == side != torch.neuron.default_stream()
        dist.all_reduce(grads)  # synchronous: the side stream waits for it
        done = side.record_event()
    overlapped = other @ other  # default stream: runs while the collective does
    torch.neuron.current_stream().wait_event(done)
    after = other.relu()  # default stream, after the wait: starts at the collective's end
    after.sum().item()
    rt.sys_trace_stop()
    spans = _spans(json.loads(rt.sys_trace_fetch())["events"])
    (cc,) = [s for s in spans if s["type"] == F.CC_RUNNING]
    kernels = {s["op"]: s for s in spans if s["type"] == F.NC_EXEC_RUNNING}
    assert kernels["aten::mm"]["start"] < cc["end"] and overlapped.shape == (64, 64)
    assert kernels["aten::relu"]["start"] >= cc["end"]


def test_wait_orders_the_current_stream_after_its_own_collective_only(group) -> None:
    """As NCCL on CUDA: ``w.wait()`` makes the current stream of its collective's core wait for
    that collective (which ends after those launched before it on the core: one queue), not
    for one launched after it, nor for another core's. Three 50 ms all_reduces: ``first`` and
    ``second`` on core 0 (in that order on its queue), ``other`` on core 1; after
    ``first.wait()``, a kernel on core 0 starts exactly at ``first``'s end (it was launched well
    before it), one on core 1 as soon as launched (its compute queue is idle)."""
    a, b = torch.ones(256, device="neuron"), torch.ones(256, device="neuron")
    c = torch.ones(256, device="neuron:1")
    x0, x1 = torch.ones(16, device="neuron"), torch.ones(16, device="neuron:1")
    torch.neuron.synchronize()
    rt = get_runtime()
    rt.sys_trace_start()
    first = dist.all_reduce(a, async_op=True)
    second = dist.all_reduce(b, async_op=True)
    other = dist.all_reduce(c, async_op=True)
    first.wait()
    k0, k1 = x0 + 1, x1 * 2
    second.wait()
    other.wait()
    rt.sys_trace_stop()
    assert k0.sum().item() == 32.0 and k1.sum().item() == 32.0
    spans = _spans(json.loads(rt.sys_trace_fetch())["events"])
    ccs = sorted(
        (s for s in spans if s["type"] == F.CC_RUNNING), key=lambda s: s["ext"][F.X_LAUNCH_NS]
    )
    assert len(ccs) == 3
    cc_first, cc_second, cc_other = ccs
    assert cc_second["start"] == cc_first["end"]  # queued behind it on core 0
    kernels = {s["op"]: s for s in spans if s["type"] == F.NC_EXEC_RUNNING}
    add, mul = kernels["aten::add"], kernels["aten::mul"]
    lat = chip("trn2").launch_latency_ns
    epoch0, epoch1 = rt.nc_epoch_of(0), rt.nc_epoch_of(1)  # device stamps -> the host clock
    assert add["ext"][F.X_LAUNCH_NS] + lat < cc_first["end"] + epoch0
    assert add["start"] == cc_first["end"] < cc_second["end"]
    assert mul["start"] + epoch1 == mul["ext"][F.X_LAUNCH_NS] + lat
    assert mul["start"] < cc_other["end"]
