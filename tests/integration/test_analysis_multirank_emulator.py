"""A 2-rank emulator run in timing mode (speed factor 1) where rank 1 runs EXTRA more matmuls
before each all_reduce: ``neuron-prof analyze`` names rank 1 as the late rank and straggler, and
rank 0's wait is the injected compute (EXTRA x the roofline model's matmul time, computed here
from the model, not read from the trace). Device work per step is several times the host's, so
the devices, not the hosts, decide who arrives last."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.emulator.chips import chip  # noqa: E402
from neuron_profiler.emulator.timing import RooflineModel  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
N, BASE, EXTRA, STEPS = 4096, 4, 6, 4

WORKER = r"""
import os, sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
emu.enable(cores=1, speed_factor=1.0, numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule
torch.set_num_threads(1)  # two ranks share this machine's cores
out, n, base, extra, steps = sys.argv[1], *map(int, sys.argv[2:6])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
a = torch.ones(n, n, device="neuron")
t = torch.ones(1024, device="neuron")


def step():
    x = a
    for _ in range(base + (extra if rank == 1 else 0)):
        x = x @ a
    dist.all_reduce(t)
    t.sum().item()


step()  # warm
with profile(activities=[ProfilerActivity.CPU, NEURON],
             schedule=schedule(wait=0, warmup=1, active=steps),
             on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(steps + 1):
        step()
        prof.step()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("straggler")
    run_ranks(
        WORKER,
        lambda r: [str(tmp / f"rank{r}.pt.trace.json"), str(N), str(BASE), str(EXTRA), str(STEPS)],
        tmp,
    )
    return [tmp / f"rank{r}.pt.trace.json" for r in range(2)]


def last_compute_before_collectives(path: Path) -> list[float]:
    """Per all_reduce, the end (µs) of the last matmul kernel before it started."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    mm_ends = sorted(e["ts"] + e["dur"] for e in events if e["name"] == "TensorE: mm")
    cc = sorted(e["ts"] for e in events if e["name"] == "CC: allreduce")
    return [max(t for t in mm_ends if t <= start + 1e-3) for start in cc]


def test_late_rank_and_wait_equal_the_injected_compute(
    rank_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from neuron_profiler.cli.main import main
    from neuron_profiler.reports.json_report import schema_text

    mm_ns = RooflineModel(chip("trn2"), speed_factor=1.0).kernel_ns(
        flops=2 * N**3, bytes_moved=3 * N * N * 4, dtype="float32", matrix=True
    )
    injected_ms = EXTRA * mm_ns / 1e6
    assert main(["analyze", "--json", *map(str, rank_files)]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text()))
    d = doc["distributed"]
    assert d["available"] and len(d["spans"]) == 1
    span = d["spans"][0]
    assert span["ranks"] == [0, 1] and span["world_size"] == 2
    (allreduce,) = span["collectives"]
    assert allreduce["name"] == "allreduce" and allreduce["calls"] == STEPS
    assert allreduce["late_rank"] == 1
    per_rank = {p["rank"]: p for p in allreduce["per_rank"]}
    assert per_rank[1]["late"] == STEPS
    # rank 0 waits the injected compute each step, give or take when each host started its
    # step's device work (host jitter of a few ms) ...
    assert per_rank[0]["wait_skew_ms"] / STEPS == pytest.approx(injected_ms, rel=0.25)
    assert per_rank[0]["wait_recorded_ms"] / STEPS == pytest.approx(injected_ms, rel=0.25)
    assert per_rank[1]["wait_skew_ms"] == 0
    # ... and exactly the difference of the ranks' last matmul ends before each all_reduce,
    # read from the raw JSON (one host clock: no alignment needed)
    ready = [last_compute_before_collectives(p) for p in rank_files]
    expect_ms = sum(b - a for a, b in zip(*ready, strict=True)) / 1e3
    assert per_rank[0]["wait_skew_ms"] == pytest.approx(expect_ms, abs=0.01)
    rows = {r["rank"]: r for r in span["ranks_summary"]}
    # compute before the all_reduce is modelled device time: the difference is the injection
    assert rows[1]["compute_before_collective_ms"] - rows[0][
        "compute_before_collective_ms"
    ] == pytest.approx(injected_ms, rel=0.01)
    assert [(s["rank"], s["metric"]) for s in span["stragglers"]] == [
        (1, "compute_before_collective")
    ]
    assert rows[1]["straggler"] and not rows[0]["straggler"]
    assert abs(rows[1]["clock_offset_us"]) < 50  # one host clock: aligned ends agree
