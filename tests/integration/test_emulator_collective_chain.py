"""Async collectives queue behind each other without blocking the host, and ``Work.wait()`` waits
for its own collective only, as with NCCL on CUDA. Two ranks over gloo, two cores each, numerics
mode; the late rank sleeps ``LATE_S`` (1 s) before the collectives it is late for, so every
host-side check is an ordering between timestamps taken on the ranks' one clock
(``time.time_ns()``) with that second as its margin (an early rank's launch or wait takes
milliseconds). Device times are checked against hand-worked numbers: the queue rule
(``start = max(arrivals)``, ``end = start + modelled duration``) applied to the launch times the
trace records.

- ``chain``: rank 1 is late for two back-to-back ``all_reduce(async_op=True)``. Rank 0's second
  launch returns at once (it used to block until rank 1 arrived: the next collective resolved
  the one before); the second starts on both devices at the first's end.
- ``own``: rank 1 is on time for the first collective, late for the second (same core). Rank 0's
  ``w1.wait()`` returns before rank 1 issues the second, and only the first's end orders the
  stream (work launched after it starts at the first's end, before the second's start).
- ``cores``: the same with the second collective on core 1: ``w1.wait()`` (core 0) neither
  waits for core 1's collective nor moves core 1's stream (it used to resolve every core's).
"""

from __future__ import annotations

import json

import pytest
from ranks import event_spans, run_ranks

pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.timing import RooflineModel  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
NUMEL, SPEED, LATE_S = 1024, 1e-4, 1.0  # a 100 ms all_reduce: longer than any launch gap

WORKER = r"""
import json, os, sys, time
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.runtime import get_runtime

out, numel, speed, late_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(1)  # two ranks share this machine's cores
emu.enable(cores=2, speed_factor=speed, numerics=True)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
rt = get_runtime()
now = time.time_ns
record = {}


def late():
    if rank == 1:
        time.sleep(late_s)


def chain(m, a, b, b1, u, u1):
    late()
    m["arrive"] = now()
    w1 = dist.all_reduce(a, async_op=True)
    m["first"] = now()
    w2 = dist.all_reduce(b, async_op=True)
    m["second"] = now()
    for _ in range(10):  # reads nothing the collectives write
        u.add_(1.0)
    m["adds"] = now()
    w2.wait()
    m["waited"] = now()
    return [a, b, u + 1]  # the add, launched after w2.wait(): starts at the second's end


def own(m, a, b, b1, u, u1):
    w1 = dist.all_reduce(a, async_op=True)
    late()
    m["arrive2"] = now()
    w2 = dist.all_reduce(b, async_op=True)
    w1.wait()
    m["waited1"] = now()
    v = u + 1  # after w1.wait(): starts at the first's end, not the second's
    w2.wait()
    return [a, b, v]


def cores(m, a, b, b1, u, u1):
    w1 = dist.all_reduce(a, async_op=True)
    late()
    m["arrive2"] = now()
    w2 = dist.all_reduce(b1, async_op=True)
    w1.wait()
    m["waited1"] = now()
    v = u1 + 1  # core 1, after core 0's w1.wait(): its stream was not moved
    w2.wait()
    return [a, b1, v]


for name, body in (("chain", chain), ("own", own), ("cores", cores)):
    a = torch.full((numel,), rank + 1.0, device="neuron")
    b = torch.full((numel,), 10.0 * (rank + 1), device="neuron")
    b1 = torch.full((numel,), 10.0 * (rank + 1), device="neuron:1")
    u, u1 = torch.zeros(16, device="neuron"), torch.zeros(16, device="neuron:1")
    torch.neuron.synchronize()
    dist.barrier()
    rt.sys_trace_start()
    m = {}
    outputs = body(m, a, b, b1, u, u1)
    rt.sys_trace_stop()
    m["sums"] = [t.sum().item() for t in outputs]
    m["events"] = json.loads(rt.sys_trace_fetch())["events"]
    m["epochs"] = [rt.nc_epoch_of(c) for c in range(2)]
    record[name] = m
json.dump(record, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("chain")
    run_ranks(
        WORKER,
        lambda r: [str(tmp / f"rank{r}.json"), str(NUMEL), str(SPEED), str(LATE_S)],
        tmp,
    )
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def _spans(run: dict, event_type: str) -> list[tuple[int, int, dict]]:
    """Spans of this type by start (``ranks.event_spans``; each core's own epoch)."""
    return sorted(
        event_spans(run["events"], event_type, run["epochs"].__getitem__), key=lambda s: s[0]
    )


LAT = chip("trn2").launch_latency_ns
DUR = RooflineModel(chip("trn2"), speed_factor=SPEED).collective_ns(
    nbytes=NUMEL * 4, world=2, collective="allreduce"
)


def _launch(data: dict) -> int:
    return data[F.EXT_KEY][F.X_LAUNCH_NS]


def _collectives(ranks: list[dict], case: str) -> list[list[tuple[int, int, dict]]]:
    """Per rank, its two collectives (cc_running), in launch order."""
    out = []
    for run in ranks:
        ccs = sorted(_spans(run[case], F.CC_RUNNING), key=lambda s: _launch(s[2]))
        assert len(ccs) == 2
        out.append(ccs)
    return out


def _kernels(run: dict, op: str) -> list[tuple[int, int, dict]]:
    return [s for s in _spans(run, F.NC_EXEC_RUNNING) if s[2][F.EXT_KEY][F.X_OP] == op]


def test_results_are_right(ranks) -> None:
    """1 + 2 and 10 + 20 per element; the last op's sum: 16 x (10 adds + 1), or 16 x 1."""
    for run in ranks:
        assert run["chain"]["sums"] == [3.0 * NUMEL, 30.0 * NUMEL, 16.0 * 11]
        assert run["own"]["sums"] == [3.0 * NUMEL, 30.0 * NUMEL, 16.0]
        assert run["cores"]["sums"] == [3.0 * NUMEL, 30.0 * NUMEL, 16.0]


def test_a_collective_launched_behind_a_pending_one_does_not_block_the_host(ranks) -> None:
    early, late = (run["chain"] for run in ranks)
    # rank 0 launched both collectives and the adds before rank 1 issued its first collective
    assert early["second"] < early["adds"] < late["arrive"], (late["arrive"] - early["adds"]) / 1e6
    # its one block is at w2.wait(), after its launches, for rank 1 (one coupling span)
    coupling = [
        (a, b)
        for a, b, d in _spans(early, F.EXT_EMULATOR_OVERHEAD)
        if d[F.EXT_KEY][F.X_OVERHEAD] == F.OVERHEAD_COUPLING
    ]
    assert len(coupling) == 1 and coupling[0][0] >= early["adds"]
    assert coupling[0][1] >= late["arrive"] and early["waited"] >= late["arrive"]
    # the runtime calls of both launches ended before rank 1 arrived
    calls = [
        b
        for _, b, d in _spans(early, F.NRT_MODEL_SUBMIT)
        if d[F.EXT_KEY][F.X_OP] == "c10d::allreduce_"
    ]
    assert len(calls) == 2 and max(calls) < late["arrive"]


def test_the_second_collective_starts_at_the_firsts_end_on_both_devices(ranks) -> None:
    """By hand: the first starts at the last arrival (rank 1's launch + the launch latency, its
    queues idle), the second at the first's end (both ranks launched it earlier than that)."""
    (e1, e2), (l1, l2) = _collectives(ranks, "chain")
    start1 = _launch(l1[2]) + LAT
    assert e1[0] == l1[0] == start1 and e1[1] == l1[1] == start1 + DUR
    end1 = start1 + DUR
    assert max(_launch(e2[2]), _launch(l2[2])) + LAT < end1  # the queue, not a launch, decides
    assert e2[0] == l2[0] == end1 and e2[1] == l2[1] == end1 + DUR
    # rank 0's device waited for rank 1 before the first only; nobody waited before the second
    (barrier,) = _spans(ranks[0]["chain"], F.CC_EXEC_BARRIER)
    assert barrier[0] == _launch(e1[2]) + LAT and barrier[1] == start1
    assert not _spans(ranks[1]["chain"], F.CC_EXEC_BARRIER)
    # op ids in launch order
    assert [c[2]["op_id"] for c in (e1, e2)] == [1, 2]
    # the add launched after w2.wait() starts at the second's end
    (after,) = _kernels(ranks[0]["chain"], "aten::add")
    assert after[0] == end1 + DUR


def test_wait_returns_once_its_own_collective_is_done(ranks) -> None:
    early, late = (run["own"] for run in ranks)
    assert early["waited1"] < late["arrive2"], (early["waited1"] - late["arrive2"]) / 1e6
    (e1, e2), (l1, l2) = _collectives(ranks, "own")
    # the first: both on time, it starts at the last arrival of the two
    start1 = max(_launch(e1[2]), _launch(l1[2])) + LAT
    assert e1[0] == l1[0] == start1 and e1[1] == l1[1] == start1 + DUR
    # the second: rank 1's late launch decides
    start2 = _launch(l2[2]) + LAT
    assert e2[0] == l2[0] == start2 > start1 + DUR
    # the add after w1.wait() (launched before the first's end) starts at the first's end
    (after,) = _kernels(ranks[0]["own"], "aten::add")
    assert _launch(after[2]) + LAT < start1 + DUR and after[0] == start1 + DUR < start2


def test_wait_on_one_core_leaves_the_other_cores_collective_pending(ranks) -> None:
    early, late = (run["cores"] for run in ranks)
    assert early["waited1"] < late["arrive2"], (early["waited1"] - late["arrive2"]) / 1e6
    (e1, e2), (l1, l2) = _collectives(ranks, "cores")
    assert (e1[2]["device_core_idx"], e2[2]["device_core_idx"]) == (0, 1)
    start2 = _launch(l2[2]) + LAT
    assert e2[0] == l2[0] == start2
    # core 1's add, launched after core 0's w1.wait(): its stream did not wait for anything
    (after,) = _kernels(ranks[0]["cores"], "aten::add")
    assert after[2]["device_core_idx"] == 1
    assert after[0] == _launch(after[2]) + LAT < start2
