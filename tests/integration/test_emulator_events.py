"""Invariants of the emulated runtime's event stream over a real training loop, checked on the
raw fetch output and through the project's parser (every start has a stop, no overlap within a
queue, device work starts after its launch, host syncs end after the work they wait for,
correlation ids on runtime calls and their device work, allocation/free balance)."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime, set_correlation_provider  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402
from neuron_profiler.runtime_trace.activities import ActivityKind  # noqa: E402
from neuron_profiler.runtime_trace.parser import parse_system_trace  # noqa: E402

pytestmark = pytest.mark.torch
DEVICE_TYPES = {F.NC_EXEC_RUNNING, F.CC_RUNNING} | F.DMA_TYPES


def _train_steps(speed_factor: float) -> bytes:
    emu.enable(cores=2, speed_factor=speed_factor)
    emu.add_fallback_ops("aten::median")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)
    ).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    ids = itertools.count(100)
    rt = get_runtime()
    set_correlation_provider(lambda: next(ids))
    rt.sys_trace_start()
    try:
        for _ in range(3):
            opt.zero_grad()
            out = model(x.to("neuron"))
            loss = torch.nn.functional.mse_loss(out, y.to("neuron")) + out.median() * 0
            loss.backward()
            opt.step()
            loss.item()
        side = torch.ones(8, device="neuron:1") * 2
        torch.neuron.synchronize()
        del side
    finally:
        rt.sys_trace_stop()
        set_correlation_provider(None)
        emu.reset_fallback_ops()
        emu.enable(cores=2, speed_factor=1.0)
    return rt.sys_trace_fetch()


@pytest.fixture(scope="module", params=[1.0, 0.02], ids=["host-bound", "device-bound"])
def payload(request) -> bytes:
    return _train_steps(request.param)


def _pairs(events: list[dict]) -> list[tuple[dict, dict]]:
    opened, pairs = {}, []
    for e in events:
        if e["phase"] == F.START:
            opened[(e["event_type"], e["tracking_id"])] = e
        elif e["phase"] == F.STOP:
            pairs.append((opened.pop((e["event_type"], e["tracking_id"])), e))
    assert not opened, "a start without its stop"
    return pairs


def test_every_start_has_a_stop_and_the_parser_agrees(payload: bytes) -> None:
    events = json.loads(payload)["events"]
    pairs = _pairs(events)
    assert all(stop["timestamp_ns"] >= start["timestamp_ns"] for start, stop in pairs)
    acts = parse_system_trace(payload)
    instants = sum(
        e["phase"] == F.INSTANT and e["event_type"] != F.TIMESTAMP_SYNC_POINT for e in events
    )
    assert acts.unpaired == 0 and acts.malformed == 0 and len(acts) == len(pairs) + instants
    kinds = Counter(ActivityKind(k).name for k in acts.kind)
    assert kinds["KERNEL"] > 0 and kinds["DMA"] > 0 and kinds["HOST_SYNC"] > 0
    assert kinds["FALLBACK"] == 3 and kinds["RUNTIME_CALL"] == kinds["KERNEL"] + kinds["DMA"]
    assert bool(acts.modelled[acts.kind == ActivityKind.KERNEL].all())


def _on_host_clock(events: list[dict]) -> list[dict]:
    """The events with device stamps mapped to the host clock through their core's sync point
    (the emulated clocks do not drift: one sync point per core and fetch maps them exactly)."""
    sync = {e["nc_idx"]: e["data"] for e in events if e["event_type"] == F.TIMESTAMP_SYNC_POINT}
    out = []
    for e in events:
        nc = e["data"].get("nc_timestamp_ns") if e["event_type"] != F.TIMESTAMP_SYNC_POINT else None
        if nc is not None:
            s = sync[e["nc_idx"]]
            e = {**e, "timestamp_ns": s["cpu_timestamp_ns"] + nc - s["nc_timestamp_ns"]}
        out.append(e)
    return out


def test_no_overlap_within_a_queue_and_device_starts_after_launch(payload: bytes) -> None:
    pairs = _pairs(_on_host_clock(json.loads(payload)["events"]))
    calls = {_exec(s): s for s, _ in pairs if s["event_type"] in F.HOST_CALL_TYPES}
    queues = defaultdict(list)
    for start, stop in pairs:
        if start["event_type"] not in DEVICE_TYPES:
            continue
        ext = start["data"][F.EXT_KEY]
        queues[(start["nc_idx"], ext[F.X_QUEUE])].append(
            (start["timestamp_ns"], stop["timestamp_ns"])
        )
        call = calls[_exec(start)]
        assert start["timestamp_ns"] >= ext[F.X_LAUNCH_NS] == call["timestamp_ns"]
        assert call["thread_id"] == start["thread_id"] and call["nc_idx"] == start["nc_idx"]
    assert {q for _, q in queues} >= {F.QUEUE_COMPUTE, F.QUEUE_DMA}
    for spans in queues.values():
        spans.sort()
        starts, ends = np.array(spans).T
        assert (starts[1:] >= ends[:-1]).all()


def test_host_sync_ends_after_the_work_it_waits_for(payload: bytes) -> None:
    pairs = _pairs(_on_host_clock(json.loads(payload)["events"]))
    device = [
        (s["nc_idx"], s["data"][F.EXT_KEY][F.X_LAUNCH_NS], e["timestamp_ns"])
        for s, e in pairs
        if s["event_type"] in DEVICE_TYPES
    ]
    syncs = [(s, e) for s, e in pairs if s["event_type"] == F.EXT_HOST_SYNC]
    assert {s["data"][F.EXT_KEY][F.X_SYNC_REASON] for s, _ in syncs} >= {
        "item",
        "fallback",
        "synchronize",
    }
    for start, stop in syncs:
        launched_before = [
            end
            for core, launch, end in device
            if core == start["nc_idx"] and launch <= start["timestamp_ns"]
        ]
        assert stop["timestamp_ns"] >= max(launched_before, default=0)


def test_each_host_sync_is_recorded_once(payload: bytes) -> None:
    """torch.neuron.synchronize() waits for both cores but is one host call: one span, on the
    core that finished last (core 1 ran the last op), not a duplicate per core."""
    pairs = _pairs(_on_host_clock(json.loads(payload)["events"]))
    syncs = [
        s
        for s, _ in pairs
        if s["event_type"] == F.EXT_HOST_SYNC
        and s["data"][F.EXT_KEY][F.X_SYNC_REASON] == "synchronize"
    ]
    assert [s["nc_idx"] for s in syncs] == [1]


def test_correlation_ids_link_runtime_calls_to_device_work(payload: bytes) -> None:
    acts = parse_system_trace(payload)
    calls = acts.kind == ActivityKind.RUNTIME_CALL
    work = np.isin(acts.kind, [ActivityKind.KERNEL, ActivityKind.DMA])
    assert (acts.correlation_id[calls | work] >= 100).all()
    by_exec = dict(
        zip(acts.exec_id[calls].tolist(), acts.correlation_id[calls].tolist(), strict=True)
    )
    assert [by_exec[x] for x in acts.exec_id[work].tolist()] == acts.correlation_id[work].tolist()
    assert len(set(by_exec.values())) > 10  # distinct ops got distinct ids


def test_allocations_and_frees_carry_sizes(payload: bytes) -> None:
    events = json.loads(payload)["events"]
    allocs = {
        e["data"]["tensor_id"]: e["data"]["size"]
        for e in events
        if e["event_type"] == F.NRT_TENSOR_ALLOCATE
    }
    frees = {
        e["data"]["tensor_id"]: e["data"]["size"]
        for e in events
        if e["event_type"] == F.NRT_TENSOR_FREE
    }
    assert allocs and frees and set(frees) <= set(allocs)
    assert all(allocs[t] == size > 0 for t, size in frees.items())
    assert 16 * 32 * 4 in allocs.values()  # the input batch copied to the device


def test_ring_overflow_on_a_real_loop_reports_drops_and_parses() -> None:
    emu.enable(cores=2)
    model = torch.nn.Linear(16, 16).to("neuron")
    x = torch.randn(4, 16)
    rt = get_runtime()
    rt.sys_trace_start(max_events_per_nc=50)
    try:
        for _ in range(5):
            model(x.to("neuron")).sum().backward()
    finally:
        rt.sys_trace_stop()
    payload = rt.sys_trace_fetch()
    doc = json.loads(payload)
    kept = [e for e in doc["events"] if e["event_type"] != F.TIMESTAMP_SYNC_POINT]
    dropped = doc["neuron_profiler"]["dropped_events"]
    assert len([e for e in kept if e["nc_idx"] == 0]) == 50 and dropped["0"] > 0
    assert dropped["1"] == 0
    acts = parse_system_trace(payload)
    assert acts.malformed == 0 and len(acts) > 0


@pytest.mark.parametrize("env, kept", [(None, False), ("true", True)])
def test_collector_source_records_tensor_events_only_when_asked(monkeypatch, env, kept) -> None:
    from neuron_profiler.collectors.sources import ENV_TENSOR_EVENTS, EmulatorSource

    if env is None:
        monkeypatch.delenv(ENV_TENSOR_EVENTS, raising=False)
    else:
        monkeypatch.setenv(ENV_TENSOR_EVENTS, env)
    emu.enable(cores=2)
    source = EmulatorSource()
    source.start(10_000, None)
    try:
        a = torch.ones(64, device="neuron") * 3
        b = (a + 1).sum()
        b.item()
        del a, b
    finally:
        payload = source.stop()
    types = Counter(e["event_type"] for e in json.loads(payload)["events"])
    assert (types[F.NRT_TENSOR_ALLOCATE] > 0) == kept and (types[F.NRT_TENSOR_FREE] > 0) == kept
    assert types[F.NC_EXEC_RUNNING] >= 6 and types[F.NRT_MODEL_SUBMIT] >= 6  # the rest stays on
    assert types[F.TIMESTAMP_SYNC_POINT] >= 1
    assert not get_runtime().tracking_tensors  # stopped: no tensor is tracked any more


def _exec(event: dict) -> int:
    """The exec id of an emulated event: real key on device events, our extension's on the
    host calls and copies (the real runtime writes it on kbl_exec_* stages instead)."""
    data = event["data"]
    return data["exec_id"] if "exec_id" in data else data["neuron_profiler"]["exec_id"]
