"""A training process armed for on-demand capture (run as a script by the capture tests):
a tiny MLP on the emulated device in timing mode, each step wrapped in ``train_step_<i>`` so a
test can tell which steps a capture covered, independently of the profiler's own step marks.

    python tests/on_demand_workload.py DIR [--ranks N --rank R --port P] [--max-steps S]

Prints "armed <pid>" once armed. Stops after S steps, or when DIR/stop exists.
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
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=3000)
    args = parser.parse_args()

    import torch

    from neuron_profiler import emulator

    emulator.enable(cores=1, chip="trn2", numerics=False)
    if args.ranks > 1:
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=args.rank, world_size=args.ranks)
    from neuron_profiler import on_demand

    on_demand.enable(dir=args.dir)
    dev = torch.device("neuron:0")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device=dev), torch.randint(0, 8, (32,), device=dev)
    print(f"armed {os.getpid()}", flush=True)
    stop = args.dir / "stop"
    for i in range(args.max_steps):
        with torch.profiler.record_function(f"train_step_{i}"):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        time.sleep(STEP_PAUSE_S)
        if stop.exists():
            break
    print("finished", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
