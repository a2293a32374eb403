"""2-rank emulator runs in timing mode (speed factor 1), one straggler injected in each:

- compute: rank 1 runs EXTRA more matmuls before each all_reduce. ``neuron-prof analyze`` names
  rank 1 as the late rank and straggler, and rank 0's wait is the injected compute (EXTRA x the
  roofline model's matmul time, computed here from the model, not read from the trace). Device
  work per step is several times the host's, so the devices, not the hosts, decide who arrives
  last.
- host: rank 1's host sleeps DELAY_MS at each step's start, before launching the step's device
  work (which is at least twice the sleep: device-bound). ``neuron-prof analyze DIR --json``
  names rank 1 as the straggler, with rank 0's wait per step the delay (within 25%) and device
  idle time, not compute, as what rank 1 was doing before it arrived."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.timing import RooflineModel  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
N, BASE, EXTRA, STEPS = 4096, 4, 6, 4
HOST_BASE, DELAY_MS = 13, 20  # the host run: 13 matmuls (~43 ms of device work) per step

WORKER = r"""
import os, sys, time
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
emu.enable(cores=1, speed_factor=1.0, numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule
torch.set_num_threads(1)  # two ranks share this machine's cores
n, steps = int(sys.argv[1]), int(sys.argv[2])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
a = torch.ones(n, n, device="neuron")
t = torch.ones(1024, device="neuron")


def run(out, base, extra, delay_ms):
    def step():
        if rank == 1 and delay_ms:  # host work before the step's launches: the device idles
            time.sleep(delay_ms / 1e3)
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


# the runs one after the other in the same ranks (a launch of two ranks costs ~4 s), each
# profile a session of its own, each starting from drained queues (the steps end in .item())
for spec in sys.argv[3:]:
    out, base, extra, delay_ms = spec.split(",")
    run(out, int(base), int(extra), int(delay_ms))
dist.destroy_process_group()
"""
RUNS = {  # folder: (matmuls per step, more on rank 1, rank 1's host delay in ms)
    "straggler": (BASE, EXTRA, 0),
    "host_straggler": (HOST_BASE, 0, DELAY_MS),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Each run's rank directory (the traces alone), both runs made by one launch."""
    tmp = tmp_path_factory.mktemp("multirank")
    files = {name: [tmp / name / f"rank{r}.pt.trace.json" for r in range(2)] for name in RUNS}
    for name in RUNS:
        (tmp / name).mkdir()
    run_ranks(
        WORKER,
        lambda r: [
            str(N),
            str(STEPS),
            *(",".join(map(str, (files[name][r], *spec))) for name, spec in RUNS.items()),
        ],
        tmp,
    )
    return files


@pytest.fixture(scope="module")
def rank_files(runs: dict[str, list[Path]]) -> list[Path]:
    return runs["straggler"]


@pytest.fixture(scope="module")
def host_late_files(runs: dict[str, list[Path]]) -> list[Path]:
    return runs["host_straggler"]


def _mm_ms() -> float:
    return (
        RooflineModel(chip("trn2"), speed_factor=1.0).kernel_ns(
            flops=2 * N**3, bytes_moved=3 * N * N * 4, dtype="float32", matrix=True
        )
        / 1e6
    )


def _analyze_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    from neuron_profiler.cli.main import main
    from neuron_profiler.reports.json_report import schema_text

    assert main(["analyze", "--json", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text()))
    return doc


def last_compute_before_collectives(path: Path) -> list[float]:
    """Per all_reduce, the end (µs) of the last matmul kernel before it started."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    mm_ends = sorted(e["ts"] + e["dur"] for e in events if e["name"] == "TensorE: mm")
    cc = sorted(e["ts"] for e in events if e["name"] == "CC: allreduce")
    return [max(t for t in mm_ends if t <= start + 1e-3) for start in cc]


def test_late_rank_and_wait_equal_the_injected_compute(
    rank_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    injected_ms = EXTRA * _mm_ms()
    doc = _analyze_json([str(p) for p in rank_files], capsys)
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
    # (one all_reduce per step: per step = per collective)
    assert rows[1]["compute_before_collective_ms_per_step"] - rows[0][
        "compute_before_collective_ms_per_step"
    ] == pytest.approx(injected_ms, rel=0.01)
    (straggler,) = span["stragglers"]
    assert straggler["rank"] == 1 and straggler["late_arrivals"] == STEPS
    (cost,) = straggler["per_rank"]
    assert cost["rank"] == 0
    assert cost["wait_ms_per_step"] == pytest.approx(expect_ms / STEPS, abs=0.01)
    assert straggler["doing"] == "compute"
    compute = next(a for a in straggler["before_arrival"] if a["activity"] == "compute")
    assert compute["excess_ms"] == pytest.approx(injected_ms, rel=0.01)
    assert rows[1]["straggler"] and not rows[0]["straggler"]
    assert abs(rows[1]["clock_offset_us"]) < 50  # one host clock: aligned ends agree


def test_host_side_straggler_named_with_the_wait_it_costs(
    host_late_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = host_late_files[0].parent
    doc = _analyze_json([str(folder)], capsys)  # the rank directory
    assert sorted(Path(t["source"]).name for t in doc["traces"]) == [
        "rank0.pt.trace.json",
        "rank1.pt.trace.json",
    ]
    d = doc["distributed"]
    assert d["available"] and len(d["spans"]) == 1
    span = d["spans"][0]
    rows = {r["rank"]: r for r in span["ranks_summary"]}
    # device-bound: each step's modelled device work is at least twice the injected host delay
    for r in (0, 1):
        assert rows[r]["compute_ms_per_step"] == pytest.approx(HOST_BASE * _mm_ms(), rel=0.01)
        assert rows[r]["compute_ms_per_step"] >= 2 * DELAY_MS
    (straggler,) = span["stragglers"]
    assert straggler["rank"] == 1
    assert (straggler["late_arrivals"], straggler["instances"]) == (STEPS, STEPS)
    assert span["straggler_note"] is None
    assert rows[1]["straggler"] and not rows[0]["straggler"]
    # what it costs rank 0 per step: the delay, within 25%
    (cost,) = straggler["per_rank"]
    assert cost["rank"] == 0
    assert cost["wait_ms_per_step"] == pytest.approx(DELAY_MS, rel=0.25)
    assert straggler["wait_cost_ms_per_step"] == cost["wait_ms_per_step"]
    assert rows[0]["wait_skew_ms_per_step"] == pytest.approx(DELAY_MS, rel=0.25)
    assert rows[0]["wait_recorded_ms_per_step"] == pytest.approx(DELAY_MS, rel=0.25)
    assert rows[1]["late_arrivals"] == STEPS and rows[0]["late_arrivals"] == 0
    # before arriving, rank 1's device idled (its host slept) while computing as much as rank 0
    assert straggler["doing"].startswith("idle: ")
    before = {a["activity"]: a for a in straggler["before_arrival"]}
    idle_excess = sum(a["excess_ms"] for k, a in before.items() if k.startswith("idle: "))
    assert idle_excess == pytest.approx(DELAY_MS, rel=0.25)
    assert abs(before["compute"]["excess_ms"]) < 1
