"""A training process for Kineto's own on-demand paths (run as a script by
tests/integration/test_kineto_on_demand.py): a tiny MLP on the emulated device, the NEURON
collector registered (``neuron_profiler.NEURON`` asked for), each step wrapped in
``train_step_<i>``, no torch.profiler in user code unless ``--warm``.

    python tests/kineto_on_demand_workload.py DIR [--warm] [--max-steps S]

``--warm``: one ``torch.profiler.profile([CPU, NEURON])`` step first, as a job that profiled
itself once would. Prints "ready <pid>" before the steps start; stops after S steps or when
DIR/stop exists. Kineto's environment (``KINETO_USE_DAEMON``, ``KINETO_CONFIG``...) comes from
the caller.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

STEP_PAUSE_S = 0.02  # keeps the steps few per second: the tests share 2 cores


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--max-steps", type=int, default=6000)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import emulator

    emulator.enable(cores=1, chip="trn2", numerics=False)
    from neuron_profiler import NEURON, collectors

    collectors.require()
    dev = torch.device("neuron:0")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device=dev), torch.randint(0, 8, (32,), device=dev)

    def step(i: int) -> None:
        with torch.profiler.record_function(f"train_step_{i}"):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

    if args.warm:
        with profile(activities=[ProfilerActivity.CPU, NEURON]):
            step(-1)
    print(f"ready {os.getpid()}", flush=True)
    stop = args.dir / "stop"
    for i in range(args.max_steps):
        step(i)
        time.sleep(STEP_PAUSE_S)
        if stop.exists():
            break
    print("finished", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
