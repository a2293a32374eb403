"""FSDP2 profiled on the emulated device (timing mode, 2 ranks over gloo, torch.profiler with
NEURON): every all-gather and reduce-scatter is a collective on the collective queue with bytes,
group and algorithm, linked to its c10d op; a late rank makes the other wait; FSDP's own
``record_function`` ranges are kept; all-gathers that FSDP prefetches overlap compute, and the
one it deliberately cannot prefetch is exposed, by exactly its modelled time.

The model is fsdp_workloads.TinyLlama (3 blocks, per-block ``fully_shard``, activation
checkpointing), TorchTitan's defaults (implicit prefetch) except no backward prefetch from
layers.1 to layers.0: layers.0's backward all-gather is issued only when its own backward
starts. Speed factor 0.01 keeps the run device-bound (the device works several times longer
than the host launches, also on a loaded machine), so overlap is decided by the device queues,
not by host gaps. Rank 1 sleeps 50 ms before each step. FSDP1 runs two steps in timing mode
as well."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.timing import RooflineModel  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
TESTS_DIR = Path(__file__).resolve().parents[1]
SPEED = 0.01
LATE_MS = 50
STEPS = 2
CONFIG = {"dim": 256, "n_layers": 3, "n_heads": 8, "n_kv_heads": 4, "vocab_size": 512}
CONFIG.update(ffn_hidden=768, seq_len=1024)
BATCH = 16

WORKER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
import fsdp_workloads as W

torch.set_num_threads(1)
# the unprofiled warm-up step at speed factor 1: its device time (~4 s at the profiled speed
# factor) is only waited for; the profiled steps run at the test's speed factor (below)
emu.enable(cores=1, numerics=False, speed_factor=1.0)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, record_function
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
mesh = init_device_mesh("neuron", (world,))
cfg = W.LlamaConfig(**json.loads(sys.argv[4]))
late_s, steps, batch = int(sys.argv[5]) / 1e3, int(sys.argv[6]), int(sys.argv[7])
model = W.shard_llama(W.make_llama(cfg).to("neuron"), mesh)
blocks = list(model.layers.values())
# an explicit list replaces FSDP's default backward prefetch (the next unit); listing the unit
# itself, gathered already, prefetches nothing: layers.0's all-gather waits for its own backward
blocks[1].set_modules_to_backward_prefetch([blocks[1]])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = W.llama_batches(cfg, steps + 1, batch)


def step(tokens):
    dist.barrier()  # host-level (no device tensor): both start together, queues drained
    if rank == 1:
        time.sleep(late_s)
    tokens = tokens.chunk(world)[rank].to("neuron")
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()


step(batches[0])  # warm: output plans, lazy init
emu.enable(cores=1, numerics=False, speed_factor=float(sys.argv[3]))
with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
    for tokens in batches[1:]:
        with record_function("step"):
            step(tokens)
prof.export_chrome_trace(sys.argv[1] + ".json")

# FSDP1 in timing mode: two steps of an MLP, its collectives captured
from neuron_profiler.emulator.runtime import get_runtime
fsdp1 = FullyShardedDataParallel(W.make_mlp(), device_id=torch.device("neuron", 0))
rt = get_runtime()
rt.sys_trace_start()
losses = W.train(fsdp1, W.mlp_batches(2, 8), "neuron", rank, world)
rt.sys_trace_stop()
cc = [e["data"]["neuron_profiler"] for e in json.loads(rt.sys_trace_fetch())["events"]
      if e["event_type"] == "cc_running" and e["phase"] == "start"]
json.dump({"fsdp1_losses": losses, "fsdp1_cc": cc}, open(sys.argv[1] + ".fsdp1.json", "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("fsdp_prof")
    run_ranks(
        WORKER,
        lambda r: [
            str(tmp / f"rank{r}"),
            str(TESTS_DIR),
            str(SPEED),
            json.dumps(CONFIG),
            str(LATE_MS),
            str(STEPS),
            str(BATCH),
        ],
        tmp,
        timeout=300,
    )
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def _unit_bytes(world: int = 2) -> dict[str, int]:
    """All-gather / reduce-scatter bytes per FSDP unit, from the model's parameters: each is
    sharded on dim 0, padded to a multiple of the world size (fp32)."""
    sys.path.insert(0, str(TESTS_DIR))
    import fsdp_workloads as W

    model = W.make_llama(W.LlamaConfig(**CONFIG))
    per_unit: dict[str, int] = {}
    for name, p in model.named_parameters():
        unit = ".".join(name.split(".")[:2]) if name.startswith("layers.") else ""
        rows = -(-p.shape[0] // world) * world
        per_unit[unit] = per_unit.get(unit, 0) + rows * p[0].numel() * 4
    return per_unit


class Collective:
    """One device collective row with its c10d op, FSDP unit and pass, and the compute that
    ran during it."""

    def __init__(self, row: dict, unit: str, backward: bool, covered_us: float) -> None:
        self.row, self.unit, self.backward, self.covered_us = row, unit, backward, covered_us
        self.name = row["args"]["Collective name"]
        self.start, self.dur = row["ts"], row["dur"]


def _covered(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def _collectives(trace: dict) -> list[Collective]:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    ranges = [e for e in events if e["name"].startswith("FSDP::")]
    backward_from = min(e["ts"] for e in ranges if e["name"].startswith("FSDP::pre_backward"))
    steps = sorted(e["ts"] for e in events if e["name"] == "step")
    compute = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == V.CAT_KERNEL
        and e["tid"] == V.queue_stream(e["pid"], 0)  # the compute queue
    )
    out = []
    for row in events:
        if not (row.get("cat") == V.CAT_KERNEL and row["args"].get(V.ARG_IS_COLLECTIVE)):
            continue
        op = ops[row["args"]["External id"]]
        owner = [
            r
            for r in ranges
            if r["tid"] == op["tid"]
            and r["ts"] <= op["ts"]
            and op["ts"] + op["dur"] <= r["ts"] + r["dur"]
            and r["name"].split(" (")[0] in ("FSDP::all_gather", "FSDP::post_backward_reduce")
        ]
        # "FSDP::all_gather (layers.0)"; the root unit's ranges carry no name
        unit = owner[0]["name"].partition(" (")[2].rstrip(")") if owner else "?"
        step_start = max(s for s in steps if s <= op["ts"])
        first_backward = min(
            (
                e["ts"]
                for e in ranges
                if e["name"].startswith("FSDP::pre_backward") and e["ts"] >= step_start
            ),
            default=backward_from,
        )
        covered = _covered(row["ts"], row["ts"] + row["dur"], compute)
        out.append(Collective(row, unit, op["ts"] >= first_backward, covered))
    return sorted(out, key=lambda c: c.start)


def test_every_all_gather_and_reduce_scatter_is_a_collective_with_its_figures(traces) -> None:
    unit_bytes = _unit_bytes()
    model = RooflineModel(chip("trn2"), speed_factor=SPEED)
    for trace in traces:
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        c10d = [e for e in events if e.get("cat") == "cpu_op" and e["name"] in _C10D]
        colls = _collectives(trace)
        assert len(colls) == len(c10d) > 0
        counts = {n: sum(c.name == n for c in colls) for n in ("allgather", "reduce_scatter")}
        # per step: forward all-gathers of root + 3 blocks, backward of root + 3 blocks (root
        # keeps nothing: reshard_after_forward), one reduce-scatter per unit
        assert counts == {"allgather": 8 * STEPS, "reduce_scatter": 4 * STEPS}
        for c in colls:
            a = c.row["args"]
            assert c.row["tid"] == a["stream"] == V.queue_stream(c.row["pid"], 2)
            assert a["Process Group Ranks"] == [0, 1] and a["Group size"] == 2
            assert a["algorithm"] == "ring" and a["bytes"] == unit_bytes[c.unit], c.unit
            modelled = model.collective_ns(nbytes=a["bytes"], world=2, collective=c.name)
            assert c.dur == pytest.approx(modelled / 1e3, abs=0.002)


_C10D = ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_")


def test_fsdp_record_function_ranges_are_kept(traces) -> None:
    for trace in traces:
        names = {e["name"].split(" (")[0] for e in trace["traceEvents"] if e.get("ph") == "X"}
        for kept in (
            "FSDP::root_pre_forward",
            "FSDP::pre_forward",
            "FSDP::post_forward",
            "FSDP::all_gather",
            "FSDP::all_gather_copy_out",
            "FSDP::pre_backward",
            "FSDP::post_backward_reduce",
            "FSDP::root_post_backward_callback",
        ):
            assert kept in names, kept
        assert "FSDP::backward_prefetch for layers.1" in names


def test_late_rank_makes_the_other_wait_at_the_first_all_gather(traces) -> None:
    """Each step ends with ``.item()`` (queues drained); rank 1 then sleeps: at the step's first
    all-gather rank 0's device waits for it (less the skew left by the previous step)."""
    first_waits = []
    for trace in traces:
        colls = _collectives(trace)
        rows = [
            e
            for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("args", {}).get(V.ARG_COLLECTIVE_WAIT)
        ]
        firsts = [c for i, c in enumerate(colls) if i % (len(colls) // STEPS) == 0]
        assert all(c.name == "allgather" and c.unit == "" for c in firsts)
        # a wait ends where its collective starts
        first_waits.append(
            [
                sum(e["dur"] / 1e3 for e in rows if abs(e["ts"] + e["dur"] - c.start) < 0.01)
                for c in firsts
            ]
        )
    assert all(ms >= LATE_MS / 2 for ms in first_waits[0]), first_waits
    assert all(ms < LATE_MS / 4 for ms in first_waits[1]), first_waits


def _covered_fraction(colls: list[Collective], name: str, unit: str, backward: bool) -> list:
    """Fraction of each such collective's modelled duration that compute covered, per step (the
    trace's microseconds carry 3 decimals: equal to 1e-4)."""
    found = [
        c.covered_us / c.dur
        for c in colls
        if (c.name, c.unit, c.backward) == (name, unit, backward)
    ]
    assert len(found) == STEPS, (name, unit, backward)
    return [round(f, 4) for f in found]


def test_prefetched_collectives_overlap_compute_the_unprefetched_one_is_exposed(traces) -> None:
    for trace in traces:
        colls = _collectives(trace)
        seen = [
            (c.name, c.unit, c.backward, round(c.covered_us, 1), round(c.dur, 1)) for c in colls
        ]
        hidden, exposed = [1.0] * STEPS, [0.0] * STEPS
        # forward (FSDP2's implicit prefetch): layers.1 and layers.2 gather on their streams
        # while the block before computes. (layers.0's gather comes right after the step's
        # first compute, the embedding, with the device drained: exposed, not asserted.)
        for unit in ("layers.1", "layers.2"):
            assert _covered_fraction(colls, "allgather", unit, False) == hidden, seen
        # backward: layers.1's gather, prefetched during layers.2's backward, is hidden;
        # layers.0's, not prefetched, runs with the compute queue idle: exposed for its whole
        # modelled duration. (layers.2's, prefetched by the root, hides behind the root's short
        # backward only when the ranks arrive together: not asserted.)
        assert _covered_fraction(colls, "allgather", "layers.1", True) == hidden, seen
        assert _covered_fraction(colls, "allgather", "layers.0", True) == exposed, seen
        # layers.2's reduce-scatter overlaps layers.1's backward compute (whose all-gather was
        # prefetched), less the time layers.1's copy-out may queue behind the reduce-scatter's
        # copy-in on the one DMA queue; layers.1's reduce-scatter is exposed with layers.0's
        # all-gather, which queues behind it on the collective queue
        assert all(f >= 0.5 for f in _covered_fraction(colls, "reduce_scatter", "layers.2", True))
        assert _covered_fraction(colls, "reduce_scatter", "layers.1", True) == exposed, seen


def test_fsdp1_runs_in_timing_mode(traces, tmp_path_factory) -> None:
    """FSDP1's flat parameter (one per wrapper, here the whole MLP) is all-gathered and its
    gradient reduce-scattered on the collective queue, with the flat parameter's bytes."""
    sys.path.insert(0, str(TESTS_DIR))
    import fsdp_workloads as W

    flat_bytes = sum(p.numel() for p in W.make_mlp().parameters()) * 4  # even: no padding
    for r in range(2):
        path = next(Path(tmp_path_factory.getbasetemp()).glob(f"fsdp_prof*/rank{r}.fsdp1.json"))
        run = json.loads(path.read_text())
        assert len(run["fsdp1_losses"]) == 2
        by_op: dict[str, list[int]] = {}
        for x in run["fsdp1_cc"]:
            by_op.setdefault(x[F.X_COLLECTIVE_OP], []).append(x[F.X_BYTES])
            assert x[F.X_RANKS] == [0, 1] and x[F.X_QUEUE] == F.QUEUE_COLLECTIVE
        assert by_op["reduce_scatter"] == [flat_bytes] * 2  # one per step
        assert len(by_op["allgather"]) >= 2 and set(by_op["allgather"]) == {flat_bytes}


def test_analyzer_flags_only_the_unprefetchable_unit(traces, tmp_path_factory) -> None:
    """``analysis.communication`` on each rank's profile: per FSDP unit, the exposed time is
    the collectives' modelled time less the compute that covered them (``_collectives``, read
    from the JSON here); only layers.0, whose backward all-gather cannot be prefetched, is
    flagged, and the finding's advice is about prefetching."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.analysis.communication import ROOT_UNIT
    from neuron_profiler.trace import load_trace

    base = Path(tmp_path_factory.getbasetemp())
    for r, trace in enumerate(traces):
        expected: dict[str, list[float]] = {}
        for c in _collectives(trace):
            unit = c.unit or ROOT_UNIT
            got = expected.setdefault(unit, [0.0, 0.0, 0.0])
            got[0] += c.dur
            got[1] += c.dur - c.covered_us
            if (c.name, c.backward) == ("allgather", True):
                got[2] += c.dur - c.covered_us
        report = analyze(load_trace(next(base.glob(f"fsdp_prof*/rank{r}.json"))))
        comm = report.communication
        units = {u.name: u for u in comm.units}
        assert set(units) == set(expected)
        for name, (coll_us, exposed_us, gather_back_us) in expected.items():
            u = units[name]
            assert u.collective_ns / 1e3 == pytest.approx(coll_us, abs=0.01), name
            assert u.exposed_ns / 1e3 == pytest.approx(exposed_us, abs=0.01), name
            back = dict(u.exposed_by_kind).get("all_gather backward", 0) / 1e3
            assert back == pytest.approx(gather_back_us, abs=0.01), name
        assert comm.flagged == ("layers.0",), [(u.name, u.exposed_ns) for u in comm.units]
        layers0 = units["layers.0"]
        assert dict(layers0.exposed_by_kind)["all_gather backward"] / 1e3 == pytest.approx(
            STEPS * next(c.dur for c in _collectives(trace) if c.unit == "layers.0"), abs=0.01
        )
        # what rank 0's device waited on at the step's first all-gather (the root's): the late
        # rank's injected sleep, each step (less the skew the previous step left)
        root_wait_ms = units[ROOT_UNIT].peer_wait_ns / 1e6
        if r == 0:
            assert root_wait_ms >= STEPS * LATE_MS / 2, root_wait_ms
        else:
            assert root_wait_ms < STEPS * LATE_MS / 4, root_wait_ms
        (f,) = [f for f in report.findings.findings if f.kind == "exposed_communication"]
        assert "layers.0" in f.title and "backward_prefetch" in f.suggestion
        assert f.recoverable_ns == layers0.exposed_ns
