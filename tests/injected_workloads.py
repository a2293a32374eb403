"""Emulator workloads with one known cause of device idle time each, for the analyzer tests
(tests/integration/test_analysis_injected.py)::

    python tests/injected_workloads.py timing OUT_DIR     # OUT_DIR/<workload>.json, timing mode
    python tests/injected_workloads.py numerics OUT_DIR   # OUT_DIR/numerics.json
    python tests/injected_workloads.py timing,numerics OUT_DIR   # both, in one process

Each workload also writes OUT_DIR/<workload>.slept.json: what each injected sleep really took
per step (``slept_path``; a sleep never returns early and wakes late on a loaded machine), the
measured truth the tests compare the analyzer's figures with.

One emulated NeuronCore (trn2, speed factor 1), ``STEPS`` profiled steps after one warm-up step.
The constants are the injected truth the tests check against; importing this module does not
import torch (only running it does).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

STEPS = 3
# device-bound work between the injected causes: CHUNK matmuls of N x N float32 (~0.41 ms each
# modelled on trn2), queued back to back: the device, not the host, sets the pace
CHUNK, N = 8, 2048
# fallback: bincount (default fallback set) twice per step, cumsum (added) once per step, on
# inputs large enough that their host work dominates the step's idle time
BINCOUNT_PER_STEP, CUMSUM_PER_STEP, BINCOUNT_N, CUMSUM_N = 2, 1, 4_000_000, 2_000_000
# data loading: each item of the stalled batches sleeps; the other batches load at once; each
# step ends in .item()
ITEM_SLEEP_S, ITEMS_PER_BATCH, STALLED_STEPS = 0.005, 4, (2,)  # profiled step numbers, 1-based
# host syncs: host work right after a mid-step .item() and after a torch.neuron.synchronize(),
# each once a step (a sleep, not a busy wait: on a loaded machine a busy wait gets the process
# descheduled after)
AFTER_ITEM_S, AFTER_SYNCHRONIZE_S = 0.020, 0.016
# host-bound: a loop of tiny ops per step (16x16 adds: the host launches slower than they run)
TINY_OPS = 60
# device-bound control: large matmuls queued back to back, one sync at the end of each step
CONTROL_MATMULS, CONTROL_N = 192, 2048  # ~80 ms of modelled device time per step
WORKLOADS = ("fallback", "dataloader", "sync", "tiny", "control", "nostep")

# seconds each injected sleep took, by label, per step (index 0: the warm-up step; a workload
# without a schedule has one step, 1), written beside the trace
_slept: dict[str, list[float]] = {}
_step = [0]


def slept_path(trace: Path) -> Path:
    return trace.with_suffix(".slept.json")


def _sleep(label: str, seconds: float) -> None:
    """``time.sleep(seconds)``, its real duration added to ``label``'s figure for the step."""
    start = time.perf_counter()
    time.sleep(seconds)
    _slept.setdefault(label, [0.0] * (1 + STEPS))[_step[0]] += time.perf_counter() - start


def _profile(path: Path, step: Callable[[], None]) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    from neuron_profiler import NEURON

    with profile(
        activities=[ProfilerActivity.CPU, NEURON],
        schedule=schedule(wait=0, warmup=1, active=STEPS),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as p:
        for i in range(1 + STEPS):
            _step[0] = i
            step()
            p.step()


def _chunk(a):  # noqa: ANN001, ANN202 - torch tensors
    """CHUNK matmuls queued on the device (~3.3 ms modelled)."""
    y = a
    for _ in range(CHUNK):
        y = y @ a
    return y


def fallback(path: Path) -> None:
    import torch

    from neuron_profiler.emulator import fallback as fb

    fb.add_fallback_ops("cumsum")
    dev = torch.device("neuron:0")
    a = torch.randn(N, N).to(dev)
    idx = torch.randint(0, 64, (BINCOUNT_N,)).to(dev)
    x = torch.randn(CUMSUM_N).to(dev)

    def step() -> None:
        _chunk(a)
        for _ in range(BINCOUNT_PER_STEP):
            torch.bincount(idx)
        _chunk(a)
        for _ in range(CUMSUM_PER_STEP):
            torch.cumsum(x, 0)
        _chunk(a).sum().item()

    _profile(path, step)
    fb.reset_fallback_ops()


def dataloader(path: Path) -> None:
    import torch

    stalled = set(STALLED_STEPS)  # batch k feeds profiled step k (batch 0: the warm-up)

    class Slow(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1024

        def __getitem__(self, i: int) -> torch.Tensor:
            if i // ITEMS_PER_BATCH in stalled:
                _sleep("item", ITEM_SLEEP_S)
            return torch.randn(N)

    dev = torch.device("neuron:0")
    a = torch.randn(N, N).to(dev)
    batches = iter(torch.utils.data.DataLoader(Slow(), batch_size=ITEMS_PER_BATCH))

    def step() -> None:
        x = next(batches).to(dev)
        y = _chunk(a)
        (x @ y).sum().item()  # the step's final sync: the device idles into the next step's stall

    _profile(path, step)


def sync(path: Path) -> None:
    import torch

    dev = torch.device("neuron:0")
    a = torch.randn(N, N).to(dev)

    def step() -> None:  # each sync finds the device busy (a chunk of matmuls) and waits
        _chunk(a).sum().item()
        _sleep("after_item", AFTER_ITEM_S)  # host work: the queue is empty meanwhile
        _chunk(a)
        torch.neuron.synchronize()
        _sleep("after_synchronize", AFTER_SYNCHRONIZE_S)
        _chunk(a)

    _profile(path, step)


def tiny(path: Path) -> None:
    import torch

    dev = torch.device("neuron:0")
    x = torch.randn(16, 16).to(dev)

    def step() -> None:
        y = x
        for _ in range(TINY_OPS):
            y = y + 1
        torch.neuron.synchronize()

    _profile(path, step)


def control(path: Path) -> None:
    import torch

    dev = torch.device("neuron:0")
    a = torch.randn(CONTROL_N, CONTROL_N).to(dev)

    def step() -> None:
        y = a
        for _ in range(CONTROL_MATMULS):
            y = y @ a
        torch.neuron.synchronize()

    _profile(path, step)


def nostep(path: Path) -> None:
    """No schedule (one "step": the whole profile), stacks recorded, and a monitor thread
    waiting beside the training thread (as tqdm's does): the analysed window is the user's
    activity, the profiler's own start and stop are no finding, and the host activity of a gap
    is the training thread's."""
    import threading

    import torch
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    dev = torch.device("neuron:0")
    a = torch.randn(N, N).to(dev)
    stop = threading.Event()
    monitor = threading.Thread(target=lambda: stop.wait(60), daemon=True)
    monitor.start()
    _step[0] = 1
    with profile(activities=[ProfilerActivity.CPU, NEURON], with_stack=True) as p:
        _chunk(a)
        _chunk(a).sum().item()
        _sleep("after_item", AFTER_ITEM_S)
        _chunk(a).sum().item()
    stop.set()
    p.export_chrome_trace(str(path))


def numerics(path: Path) -> None:
    """Numerics mode: the host computes each op's result (emulator-overhead spans)."""
    import torch

    dev = torch.device("neuron:0")
    w = torch.randn(512, 512).to(dev)
    x = torch.randn(256, 512).to(dev)

    def step() -> None:
        y = x
        for _ in range(4):
            y = torch.relu(y @ w)
        y.sum().item()
        _sleep("after_item", AFTER_ITEM_S)

    _profile(path, step)


def main(modes: str, out: Path) -> None:
    """Each mode in turn (comma-separated), the emulator re-enabled in it: one process for
    both saves a torch start-up, and each workload makes its own tensors in its own mode."""
    from neuron_profiler import emulator

    for mode in modes.split(","):
        emulator.enable(cores=1, chip="trn2", speed_factor=1.0, numerics=mode == "numerics")
        for name in WORKLOADS if mode == "timing" else ("numerics",):
            _slept.clear()
            globals()[name](out / f"{name}.json")
            slept_path(out / f"{name}.json").write_text(json.dumps(_slept))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
