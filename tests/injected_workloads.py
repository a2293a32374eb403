"""Emulator workloads with one known cause of device idle time each, for the analyzer tests
(tests/integration/test_analysis_injected.py)::

    python tests/injected_workloads.py timing OUT_DIR     # OUT_DIR/<workload>.json, timing mode
    python tests/injected_workloads.py numerics OUT_DIR   # OUT_DIR/numerics.json

One emulated NeuronCore (trn2, speed factor 1), ``STEPS`` profiled steps after one warm-up step.
The constants are the injected truth the tests check against; importing this module does not
import torch (only running it does).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

STEPS = 3
# fallback: bincount (default fallback set) twice per step, cumsum (added) once per step
BINCOUNT_PER_STEP, CUMSUM_PER_STEP, BINCOUNT_N = 2, 1, 50_000
# data loading: each item sleeps, a batch is ITEMS_PER_BATCH items; each step ends in .item()
ITEM_SLEEP_S, ITEMS_PER_BATCH = 0.004, 4
# host syncs: host work right after a .item() and after a torch.neuron.synchronize(), each step
# (a sleep, not a busy wait: on a loaded machine a busy wait gets the process descheduled after)
AFTER_ITEM_S, AFTER_SYNCHRONIZE_S, SYNC_N = 0.006, 0.004, 2048
# host-bound: a loop of tiny ops per step (16x16 adds: the host launches slower than they run)
TINY_OPS = 60
# device-bound control: large matmuls queued back to back, one sync at the end of each step
CONTROL_MATMULS, CONTROL_N = 192, 2048  # ~80 ms of modelled device time per step
WORKLOADS = ("fallback", "dataloader", "sync", "tiny", "control")


def _profile(path: Path, step: Callable[[], None]) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    from neuron_profiler import NEURON

    with profile(
        activities=[ProfilerActivity.CPU, NEURON],
        schedule=schedule(wait=0, warmup=1, active=STEPS),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as p:
        for _ in range(1 + STEPS):
            step()
            p.step()


def fallback(path: Path) -> None:
    import torch

    from neuron_profiler.emulator import fallback as fb

    fb.add_fallback_ops("cumsum")
    dev = torch.device("neuron:0")
    idx = torch.randint(0, 64, (BINCOUNT_N,)).to(dev)
    x = torch.randn(256).to(dev)

    def step() -> None:
        for _ in range(BINCOUNT_PER_STEP):
            torch.bincount(idx)
        for _ in range(CUMSUM_PER_STEP):
            torch.cumsum(x, 0)
        (x * 2).sum().item()

    _profile(path, step)
    fb.reset_fallback_ops()


def dataloader(path: Path) -> None:
    import torch

    class Slow(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1024

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(ITEM_SLEEP_S)
            return torch.randn(128)

    dev = torch.device("neuron:0")
    w = torch.randn(512, 128).to(dev)
    batches = iter(torch.utils.data.DataLoader(Slow(), batch_size=ITEMS_PER_BATCH))

    def step() -> None:
        x = next(batches).to(dev)
        for _ in range(3):
            x = torch.relu(x @ w.T) @ w
        x.sum().item()  # the step's final sync: the device idles into the next step's stall

    _profile(path, step)


def sync(path: Path) -> None:
    import torch

    dev = torch.device("neuron:0")
    w = torch.randn(SYNC_N, SYNC_N).to(dev)

    def step() -> None:  # each sync finds the device busy (a matmul of ~0.3 ms) and waits
        (w @ w).sum().item()
        time.sleep(AFTER_ITEM_S)  # host work: the queue is empty meanwhile
        _ = w @ w
        torch.neuron.synchronize()
        time.sleep(AFTER_SYNCHRONIZE_S)

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
        time.sleep(AFTER_ITEM_S)

    _profile(path, step)


def main(mode: str, out: Path) -> None:
    from neuron_profiler import emulator

    emulator.enable(cores=1, chip="trn2", speed_factor=1.0, numerics=mode == "numerics")
    for name in WORKLOADS if mode == "timing" else ("numerics",):
        globals()[name](out / f"{name}.json")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
