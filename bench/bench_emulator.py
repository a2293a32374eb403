"""Emulator overhead, side by side with the same code on CPU in one run:

    python bench/bench_emulator.py                 # ~20 s
    python bench/bench_emulator.py --ops 2000 --steps 5

1. Per-op cost: a loop of small elementwise ops (16x16 add) on CPU, and on the emulated device in
   numerics mode (results computed) and in timing mode (``numerics=False``: results not
   computed), each with no system trace running and with a trace capturing; printed as us/op and
   as ratios to CPU. Also the host cost of one 4096x4096 fp32 matmul launch in timing mode.
2. Per training step: a small transformer-encoder step (forward, backward, AdamW, loss.item())
   on CPU vs the emulated device in both modes, without and with a trace capturing, as ms/step
   and ratios. A timing-mode step also waits for its modelled device time at ``.item()``.
   The code is the same; PyTorch itself picks AdamW's multi-tensor path on the device and the
   single-tensor loop on CPU, and the math SDPA path on the device.
Blocks are interleaved and the best (minimum) block is reported, as timeit does: other load on
the machine only ever adds time.
"""

from __future__ import annotations

import argparse
import time

import neuron_profiler.emulator as emu

emu.enable(cores=2, chip="trn2")

import torch  # noqa: E402

from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402

# column -> (device, numerics mode, trace capturing)
COLUMNS = {
    "cpu": ("cpu", True, False),
    "numerics": ("neuron", True, False),
    "numerics+trace": ("neuron", True, True),
    "timing": ("neuron", False, False),
    "timing+trace": ("neuron", False, True),
}


def set_mode(numerics: bool) -> None:
    emu.enable(cores=2, chip="trn2", numerics=numerics)


def large_mm_launch_us(n: int = 4096, reps: int = 20) -> float:
    """Best host time of one n x n fp32 matmul launch in timing mode (queue drained first)."""
    set_mode(False)
    a = torch.ones(n, n).to("neuron")
    a @ a  # the output plan
    best = float("inf")
    for _ in range(reps):
        torch.neuron.synchronize()
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    torch.neuron.synchronize()
    set_mode(True)
    return best * 1e6


def small_op_us(device: str, n: int, capture: bool) -> float:
    a = torch.randn(16, 16, device=device)
    b = torch.randn(16, 16, device=device)
    rt = get_runtime()
    if capture:
        rt.sys_trace_start()
    try:
        for _ in range(50):  # warm-up: first calls of an op are slow on any device
            a = a + b
        t0 = time.perf_counter()
        for _ in range(n):
            a = a + b
        elapsed = time.perf_counter() - t0
    finally:
        if capture:
            rt.sys_trace_stop()
            rt.sys_trace_fetch()
    return elapsed / n * 1e6


def make_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16, 64).to(device)

    def step() -> None:
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        loss.item()

    return step


def step_ms(step, n: int, capture: bool) -> float:
    rt = get_runtime()
    if capture:
        rt.sys_trace_start()
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        elapsed = time.perf_counter() - t0
    finally:
        if capture:
            rt.sys_trace_stop()
            rt.sys_trace_fetch()
    return elapsed / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=5000, help="small ops per block")
    parser.add_argument("--steps", type=int, default=10, help="training steps per block")
    parser.add_argument("--blocks", type=int, default=7, help="interleaved blocks (best)")
    args = parser.parse_args()

    ops: dict[str, list[float]] = {k: [] for k in COLUMNS}
    for _ in range(args.blocks):
        for k, (device, numerics, capture) in COLUMNS.items():
            set_mode(numerics)
            ops[k].append(small_op_us(device, args.ops, capture))
    set_mode(True)
    med = {k: min(v) for k, v in ops.items()}
    print(f"per small op (16x16 add, best of {args.blocks} x {args.ops}):")
    for k, v in med.items():
        print(f"  {k:15s} {v:8.2f} us/op   x{v / med['cpu']:.1f} vs cpu")
    for mode in ("numerics", "timing"):
        print(
            f"  emulator cost per op, {mode} mode: {med[mode] - med['cpu']:.2f} us (no trace), "
            f"{med[mode + '+trace'] - med['cpu']:.2f} us (trace capturing)"
        )
    print(
        f"  timing mode, one 4096x4096 fp32 matmul launch: {large_mm_launch_us():.1f} us "
        f"(host cost; not computed)"
    )

    steps = {"cpu": make_step("cpu"), "neuron": make_step("neuron")}
    for s in steps.values():
        s()  # warm-up
    set_mode(False)
    steps["neuron"]()  # timing mode's output plans
    times: dict[str, list[float]] = {k: [] for k in COLUMNS}
    for _ in range(args.blocks):
        for k, (device, numerics, capture) in COLUMNS.items():
            set_mode(numerics)
            times[k].append(step_ms(steps[device], args.steps, capture))
    set_mode(True)
    med = {k: min(v) for k, v in times.items()}
    print(
        f"per training step (transformer encoder layer, d=64, batch 8x16, AdamW; best of "
        f"{args.blocks} x {args.steps}):"
    )
    for k, v in med.items():
        print(f"  {k:15s} {v:8.2f} ms/step x{v / med['cpu']:.2f} vs cpu")


if __name__ == "__main__":
    main()
