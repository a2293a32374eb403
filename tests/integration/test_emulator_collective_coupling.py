"""Collectives coupled across ranks: a collective starts on every rank's device when the last
rank has arrived; an early rank's device waits in a ``cc_exec_barrier`` span before its
``cc_running``. Two ranks; rank 1 sleeps 20 ms before each all_reduce; each step ends with
``.item()`` (the queues drain). Checked at speed factor 1 in a host-bound run (numerics mode,
small work) and in a device-bound run (timing mode, each step's device work at least twice its
host time)."""

from __future__ import annotations

import json

import pytest
from ranks import event_spans, run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.timing import RooflineModel  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
STEPS, NUMEL = 4, 1024

VARIANTS = ("host_bound", "device_bound")

WORKER = r"""
import json, os, sys, time
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.runtime import get_runtime

out, steps, numel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)  # two ranks share this machine's cores
emu.enable(cores=1, speed_factor=1.0)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
rt = get_runtime()


def run(variant):
    emu.enable(cores=1, speed_factor=1.0, numerics=(variant == "host_bound"))
    t = torch.ones(numel, device="neuron")
    if variant == "host_bound":
        w = torch.randn(64, 64, device="neuron")
    else:
        a = torch.ones(4096, 4096, device="neuron")

    def step():
        if variant == "host_bound":
            (w @ w).relu().sum()
            if rank == 1:
                time.sleep(0.02)
        else:
            if rank == 1:
                time.sleep(0.02)
            x = a
            for _ in range(24):  # ~80 ms of modelled device work: >= 2x the host's 20 ms + launches
                x = x @ a
        dist.all_reduce(t)
        t.sum().item()

    step()  # warm
    bounds = []
    rt.sys_trace_start()
    for _ in range(steps):
        t0 = time.time_ns()
        step()
        bounds.append((t0, time.time_ns()))
    rt.sys_trace_stop()
    events = json.loads(rt.sys_trace_fetch())["events"]
    return {"bounds": bounds, "events": events, "epoch": rt.nc_epoch_ns}


# both variants in the same ranks, one after the other, each in its own mode (enable() again)
# and from drained queues (the steps end in .item()): a launch of two ranks costs ~5 s
json.dump({variant: run(variant) for variant in sys.argv[4:]}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Each variant's run on both ranks (by variant, then rank), from one launch: the tests
    read different things from the same ranks' events."""
    tmp = tmp_path_factory.mktemp("coupling")
    run_ranks(
        WORKER,
        lambda r: [str(tmp / f"rank{r}.json"), str(STEPS), str(NUMEL), *VARIANTS],
        tmp,
    )
    ranks = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]
    return {variant: [rank[variant] for rank in ranks] for variant in VARIANTS}


def _spans(run: dict, event_type: str) -> list[tuple[int, int, dict]]:
    """(start, end, start event data) per span of this type, on the host clock."""
    return event_spans(run["events"], event_type, lambda _: run["epoch"])


def _per_step(run: dict, event_type: str) -> list[float]:
    """Milliseconds of this span type per step (spans launched inside the step)."""
    spans = _spans(run, event_type)
    return [
        sum(b - a for a, b, d in spans if lo <= d.get(F.EXT_KEY, {}).get(F.X_LAUNCH_NS, a) <= hi)
        / 1e6
        for lo, hi in run["bounds"]
    ]


@pytest.mark.parametrize("variant", VARIANTS)
def test_early_rank_waits_on_the_device_late_rank_does_not(runs, variant: str) -> None:
    ranks = runs[variant]
    model = RooflineModel(chip("trn2"), speed_factor=1.0)
    allreduce_ms = model.collective_ns(nbytes=NUMEL * 4, world=2, collective="allreduce") / 1e6
    per_rank = []
    for run in ranks:
        barrier = _per_step(run, F.CC_EXEC_BARRIER)
        running = _per_step(run, F.CC_RUNNING)
        assert all(r == pytest.approx(allreduce_ms) for r in running), running
        per_rank.append([b + r for b, r in zip(barrier, running, strict=True)])
    # rank 0 waits for rank 1's 20 ms sleep (less rank 1's own host work before it: a floor)
    assert all(ms >= 10 for ms in per_rank[0]), per_rank
    # the collective starts on both devices together, when the last rank arrived (host clock)
    starts = [[a for a, _, _ in _spans(run, F.CC_RUNNING)] for run in ranks]
    assert len(starts[0]) == len(starts[1]) >= STEPS
    assert all(abs(a - b) <= 1e6 for a, b in zip(*starts, strict=True)), starts
    # and rank 0's wait is exactly the time from its own arrival to that start
    for a, b, _ in _spans(ranks[0], F.CC_EXEC_BARRIER):
        assert b in starts[0] and b - a > 0
    assert all(ms <= allreduce_ms + 1 for ms in per_rank[1]), per_rank
    for run in ranks:  # the wait is device time on the collective queue, before the collective
        barriers = _spans(run, F.CC_EXEC_BARRIER)
        colls = _spans(run, F.CC_RUNNING)
        for _, b, d in barriers:
            assert d[F.EXT_KEY][F.X_QUEUE] == F.QUEUE_COLLECTIVE
            assert any(start == b for start, _, _ in colls)  # the collective starts at its end
    if variant == "device_bound":
        for run in ranks:
            device = _per_step(run, F.NC_EXEC_RUNNING)
            waits = [
                s + o
                for s, o in zip(
                    _per_step(run, F.EXT_HOST_SYNC),
                    _per_step(run, F.EXT_EMULATOR_OVERHEAD),
                    strict=True,
                )
            ]
            host = [(hi - lo) / 1e6 - w for (lo, hi), w in zip(run["bounds"], waits, strict=True)]
            assert all(d >= 2 * h for d, h in zip(device, host, strict=True)), (device, host)


def test_trace_shows_the_wait_as_collective_wait_on_the_collective_thread(runs) -> None:
    from neuron_profiler.runtime_trace.parser import parse_system_trace
    from neuron_profiler.runtime_trace.placement import HostOps, place
    from neuron_profiler.trace import vocabulary as V

    run = runs["host_bound"][0]  # rank 0: the early one
    payload = json.dumps({"events": run["events"], "data_version": F.DATA_VERSION}).encode()
    placed = place(parse_system_trace(payload), host_ops=HostOps.empty(), host_pid=1)
    names = [placed.names[i] for i in placed.name_id]
    waits = [i for i, n in enumerate(names) if n == V.COLLECTIVE_WAIT_PREFIX + "allreduce"]
    assert len(waits) == STEPS
    for i in waits:
        args = dict(placed.args[placed.args_id[i]])
        assert args[V.ARG_COLLECTIVE_WAIT] is True and V.ARG_IS_COLLECTIVE not in args
        assert placed.tid[i] == V.queue_stream(0, 2)  # the core's collectives thread
        assert placed.category[i] == 0  # kernel: device time
        assert (placed.end_ns[i] - placed.start_ns[i]) >= 15e6
    overhead = [n for n in names if n == V.OVERHEAD_PREFIX + "collective_coupling"]
    assert len(overhead) == STEPS  # the arrival exchange: emulator overhead, not launch cost
