"""Host <-> device copies in the trace: pageable memory is staged by the host before its DMA (and
after it, device -> host), pinned memory is read and written by the DMA itself (issue 24).

Every figure is the model's (docs/chips.md), worked by hand: a host link of 16 GB/s per trn2
logical core (64 GB/s per chip over 4), a fixed 2 µs per DMA, a 15 µs launch latency, and a host
staging bandwidth of 10 GB/s (an assumption). For 32 MiB (33,554,432 bytes): staging
3,355.4432 µs, DMA 2,097.152 + 2 = 2,099.152 µs; for 128 MiB 8,388.608 + 2 µs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

pytestmark = pytest.mark.torch

MIB32 = 32 << 20
STAGING_32_US = 3_355.4432  # 33,554,432 B at 10 GB/s
DMA_32_US = 2_099.152  # 33,554,432 B at 16 GB/s, plus 2 µs
LATENCY_US = 15.0
EPS_US = 0.002  # the trace's µs carry three decimals


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1, numerics=False)
    yield
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)


def _trace(tmp_path: Path, work: Callable[[], None]) -> list[dict[str, Any]]:
    """The complete events of one profile (CPU + NEURON) of ``work``, warmed once."""
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    work()
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        work()
        torch.neuron.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def _end(e: dict[str, Any]) -> float:
    return e["ts"] + e["dur"]


def _named(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [e for e in events if e["name"] == name]
    return found


def _copy_and_call(events: list[dict[str, Any]], direction: str) -> tuple[dict, dict]:
    """The one device copy row of this direction and the runtime call that launched it."""
    (work,) = [e for e in events if e["name"] == V.MEMCPY_NAMES[direction]]
    (call,) = [
        e
        for e in events
        if e.get("cat") == V.CAT_RUNTIME
        and e["name"].startswith(V.RUNTIME_PREFIX)
        and e["args"].get("correlation") == work["args"]["correlation"]
    ]
    return work, call


def _syncs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["name"].startswith(V.SYNC_PREFIX + "aten::")]


def _inside(e: dict[str, Any], span: dict[str, Any]) -> bool:
    return span["ts"] - EPS_US <= e["ts"] and _end(e) <= _end(span) + EPS_US


def test_pageable_copy_starts_on_the_device_after_the_host_staged_it(tmp_path: Path) -> None:
    """``x.to("neuron")`` from ordinary host memory: the runtime call lasts at least the staging
    (3,355 µs for 32 MiB) and the DMA row starts at its end plus the launch latency: it can no
    longer end before the host has the data staged. The host does not wait for the DMA."""
    from torch.profiler import record_function

    x = torch.randn(MIB32 // 4)
    out: list[Any] = []

    def work() -> None:
        out.clear()  # the warm-up's copy is freed here, not inside the span
        with record_function("copy"):
            out[:] = [x.to("neuron")]

    events = _trace(tmp_path, work)
    dma, call = _copy_and_call(events, "h2d")
    assert call["dur"] >= STAGING_32_US - EPS_US
    assert dma["ts"] == pytest.approx(_end(call) + LATENCY_US, abs=EPS_US)
    assert dma["dur"] == pytest.approx(DMA_32_US, abs=EPS_US)
    assert dma["args"][V.ARG_BYTES] == MIB32
    assert _inside(call, _named(events, "copy"))
    assert _syncs(events) == []  # stream-ordered: nothing waits for it
    assert torch.equal(out[0].cpu(), x)


def test_pinned_non_blocking_copy_overlaps_the_host_work_after_it(tmp_path: Path) -> None:
    """From pinned memory with ``non_blocking=True`` the host returns after the launch (the
    emulator's own copy of the data is an overhead span before it) and the 8,391 µs DMA of
    128 MiB runs while the host works on (a long DMA: the host's few µs from the launch to the
    next span stay far shorter, even on a loaded machine)."""
    from torch.profiler import record_function

    x = torch.randn(4 * MIB32 // 4)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned() and torch.equal(pinned, x)
    out: list[Any] = []

    def work() -> None:
        out.clear()  # the warm-up's copy is freed here, not while the host works
        with record_function("pinned copy"):
            out[:] = [pinned.to("neuron", non_blocking=True)]
        with record_function("host work"):
            time.sleep(0.02)

    events = _trace(tmp_path, work)
    dma, call = _copy_and_call(events, "h2d")
    host = _named(events, "host work")
    copy = _named(events, "pinned copy")
    overhead = _named(events, V.OVERHEAD_PREFIX + "pinned_copy")
    assert overhead["args"][V.ARG_OVERHEAD] == "pinned_copy" and _inside(overhead, copy)
    assert _end(overhead) <= call["ts"] + EPS_US  # the data, then the launch
    assert call["dur"] < STAGING_32_US  # no staging: the launch only
    assert dma["ts"] == pytest.approx(call["ts"] + LATENCY_US, abs=EPS_US)
    assert dma["dur"] == pytest.approx(4 * DMA_32_US - 6, abs=EPS_US)  # 128 MiB, one fixed 2 µs
    assert dma["ts"] < _end(copy) + EPS_US  # launched inside the call ...
    assert _end(copy) < _end(dma)  # ... which returned before its end ...
    assert host["ts"] < _end(dma) < _end(host)  # ... and it ran on while the host worked
    assert _syncs(events) == []
    assert torch.equal(out[0].cpu(), x)


def test_pinned_blocking_copy_waits_for_its_dma(tmp_path: Path) -> None:
    """Without ``non_blocking`` a copy from pinned memory returns once its DMA is done (the
    host may reuse the buffer then): a host sync ``h2d`` to the DMA's end."""
    pinned = torch.randn(MIB32 // 4).pin_memory()
    events = _trace(tmp_path, lambda: pinned.to("neuron"))
    dma, call = _copy_and_call(events, "h2d")
    (sync,) = _syncs(events)
    assert sync["args"][V.ARG_SYNC] == "h2d"
    assert dma["ts"] == pytest.approx(call["ts"] + LATENCY_US, abs=EPS_US)
    assert _end(sync) >= _end(dma) - EPS_US


def test_copy_to_pageable_host_memory_waits_for_the_dma_then_copies_out(tmp_path: Path) -> None:
    """``.cpu()`` and ``copy_`` into an ordinary host tensor (``non_blocking`` or not): the DMA
    fills the staging buffer, the host waits for it (sync ``cpu``), then copies the data out,
    at least 3,355 µs for 32 MiB, inside the op. The data arrive."""
    from torch.profiler import record_function

    x = torch.randn(MIB32 // 4)
    d = x.to("neuron")
    host = torch.empty_like(x)
    got: list[Any] = []

    def work() -> None:
        got.clear()
        with record_function("cpu"):
            got[:] = [d.cpu()]
        with record_function("copy_"):
            host.copy_(d, non_blocking=True)

    events = _trace(tmp_path, work)
    dmas = sorted((e for e in events if e["name"] == V.MEMCPY_NAMES["d2h"]), key=lambda e: e["ts"])
    syncs = sorted(_syncs(events), key=lambda e: e["ts"])
    assert len(dmas) == len(syncs) == 2
    for dma, sync, span in zip(dmas, syncs, ("cpu", "copy_"), strict=True):
        op = _named(events, span)
        assert sync["args"][V.ARG_SYNC] == "cpu" and _inside(sync, op)
        assert dma["dur"] == pytest.approx(DMA_32_US, abs=EPS_US)
        assert _end(sync) >= _end(dma) - EPS_US  # waited for the DMA ...
        assert _end(op) >= _end(dma) + STAGING_32_US - EPS_US  # ... then copied out
    assert torch.equal(got[0], x) and torch.equal(host, x)


def test_non_blocking_copy_to_the_host_lands_in_pinned_memory_without_waiting(
    tmp_path: Path,
) -> None:
    """``.to("cpu", non_blocking=True)``: as PyTorch does for an accelerator, the result is
    pinned and the host does not wait (the program synchronizes before reading it, as on
    CUDA); ``.item()`` still waits for its tiny copy."""
    x = torch.randn(MIB32 // 4)
    d = x.to("neuron")
    got: list[Any] = []

    def work() -> None:
        got.clear()
        got[:] = [d.to("cpu", non_blocking=True), d[7].item()]

    events = _trace(tmp_path, work)
    (sync,) = _syncs(events)
    assert sync["args"][V.ARG_SYNC] == "item"
    big = [e for e in events if e["name"] == V.MEMCPY_NAMES["d2h"] and e["dur"] > 1000]
    assert len(big) == 1 and big[0]["dur"] == pytest.approx(DMA_32_US, abs=EPS_US)
    assert _end(sync) >= _end(big[0]) - EPS_US  # the item's copy queued behind it
    result, value = got
    assert result.is_pinned() and torch.equal(result, x) and value == x[7].item()
