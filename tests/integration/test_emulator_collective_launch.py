"""A coupled collective's launch does not block the host: as with the real runtime, an early
rank goes on launching while its device waits for the late one. Two ranks; rank 1 sleeps 20 ms
before each ``all_reduce(async_op=True)``; after it, each rank launches ``LAUNCHES`` device ops
that do not read its output, then waits for it and reads the result (``.item()``). Checked:
rank 0's launches all happen before rank 1 arrives, the collective still starts on both devices
exactly when the last rank arrived (rank 0's device waits in a ``cc_exec_barrier``), the ops it
launched ran on its device meanwhile, and the results are right (numerics mode)."""

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
STEPS, NUMEL, LAUNCHES = 3, 1024, 20

WORKER = r"""
import json, os, sys, time
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.runtime import get_runtime

out, steps, numel, launches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)  # two ranks share this machine's cores
emu.enable(cores=1, speed_factor=1.0, numerics=True)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
rt = get_runtime()
t = torch.ones(numel, device="neuron")
u = torch.zeros(16, device="neuron")
record = {"arrive": [], "launched": [], "sums": [], "counts": []}


def step(keep):
    t.fill_(rank + 1.0)
    u.zero_()
    torch.neuron.synchronize()
    if rank == 1:
        time.sleep(0.02)
    arrive = time.time_ns()
    work = dist.all_reduce(t, async_op=True)
    marks = []
    for _ in range(launches):  # reads nothing the collective writes
        u.add_(1.0)
        marks.append(time.time_ns())
    work.wait()
    total = t.sum().item()
    count = u.sum().item()
    if keep:
        record["arrive"].append(arrive)
        record["launched"].append(marks)
        record["sums"].append(total)
        record["counts"].append(count)


step(False)  # warm
rt.sys_trace_start()
for _ in range(steps):
    step(True)
rt.sys_trace_stop()
record["events"] = json.loads(rt.sys_trace_fetch())["events"]
record["epoch"] = rt.nc_epoch_of(0)
json.dump(record, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("launch")
    run_ranks(
        WORKER,
        lambda r: [str(tmp / f"rank{r}.json"), str(STEPS), str(NUMEL), str(LAUNCHES)],
        tmp,
    )
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def _spans(run: dict, event_type: str) -> list[tuple[int, int, dict]]:
    """Spans of this type by start (``ranks.event_spans``; one core, one epoch)."""
    return sorted(
        event_spans(run["events"], event_type, lambda _: run["epoch"]), key=lambda s: s[0]
    )


def test_results_are_right(ranks) -> None:
    for run in ranks:
        assert run["sums"] == [3.0 * NUMEL] * STEPS  # 1 + 2 per element
        assert run["counts"] == [16.0 * LAUNCHES] * STEPS


def test_the_early_rank_launches_on_while_the_late_one_has_not_arrived(ranks) -> None:
    early, late = ranks
    for marks, arrive in zip(early["launched"], late["arrive"], strict=True):
        assert len(marks) == LAUNCHES
        assert max(marks) < arrive, (max(marks) - arrive) / 1e6  # host returned at once
    # the runtime calls of those launches too: before rank 1's collective was launched
    late_launches = [d[F.EXT_KEY][F.X_LAUNCH_NS] for _, _, d in _spans(late, F.CC_RUNNING)]
    calls = [
        a for a, _, d in _spans(early, F.NRT_MODEL_SUBMIT) if d[F.EXT_KEY][F.X_OP] == "aten::add_"
    ]
    assert len(calls) == len(late_launches) * LAUNCHES == STEPS * LAUNCHES
    for i, late_launch in enumerate(late_launches):
        assert max(calls[i * LAUNCHES : (i + 1) * LAUNCHES]) < late_launch


def test_the_collective_still_starts_on_both_devices_when_the_last_rank_arrives(ranks) -> None:
    lat = chip("trn2").launch_latency_ns
    dur = RooflineModel(chip("trn2")).collective_ns(
        nbytes=NUMEL * 4, world=2, collective="allreduce"
    )
    early, late = (_spans(run, F.CC_RUNNING) for run in ranks)
    assert len(early) == len(late) == STEPS
    barriers = _spans(ranks[0], F.CC_EXEC_BARRIER)
    assert len(barriers) == STEPS and not _spans(ranks[1], F.CC_EXEC_BARRIER)
    adds = [
        (a, d)
        for a, _, d in _spans(ranks[0], F.NC_EXEC_RUNNING)
        if d[F.EXT_KEY][F.X_OP] == "aten::add_"
    ]
    for (s0, e0, d0), (s1, e1, d1), (b_start, b_end, _) in zip(early, late, barriers, strict=True):
        # the late rank arrived last: its launch (idle queues) plus the launch latency
        arrival = d1[F.EXT_KEY][F.X_LAUNCH_NS] + lat
        assert s0 == s1 == arrival and e0 == e1 == arrival + dur
        # the early rank's device waited from its own arrival to the group's start
        assert b_start == d0[F.EXT_KEY][F.X_LAUNCH_NS] + lat and b_end == s0
        assert b_end - b_start >= 10e6  # rank 1's 20 ms sleep, less its own host work
        # the ops launched after it ran on the device during the wait
        launch = d0[F.EXT_KEY][F.X_LAUNCH_NS]
        ran = [a for a, d in adds if launch <= d[F.EXT_KEY][F.X_LAUNCH_NS] <= s0]
        assert len(ran) == LAUNCHES and all(b_start <= a < s0 for a in ran)


def test_the_host_blocks_only_where_it_needs_the_collective(ranks) -> None:
    """Rank 0's only block is at ``work.wait()`` (one coupling span a step, after its
    launches); none is inside the collective's launch call."""
    early = ranks[0]
    coupling = [
        (a, b)
        for a, b, d in _spans(early, F.EXT_EMULATOR_OVERHEAD)
        if d[F.EXT_KEY][F.X_OVERHEAD] == F.OVERHEAD_COUPLING
    ]
    assert len(coupling) == STEPS
    calls = [
        (a, b)
        for a, b, d in _spans(early, F.NRT_MODEL_SUBMIT)
        if d[F.EXT_KEY][F.X_OP] == "c10d::allreduce_"
    ]
    for (block, _), (c0, c1), marks in zip(coupling, calls, early["launched"], strict=True):
        assert c1 - c0 < 5e6 and block >= max(marks)
