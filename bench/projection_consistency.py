"""Issue 27, point 6(c): one training script profiled on the CPU, its trace projected onto trn2,
against the same script on the emulated neuron device in timing mode (trn2, speed factor 1)::

    python bench/projection_consistency.py [--steps 5] [--width 1024] [--batch 256] [--repeat 3]

Both runs are in fresh interpreters of this script (the emulator changes the process); both use
``record_shapes=True`` and ProfilerStep steps. Prints the two mean steps and the projection's
error against the emulator (the emulator's step is itself modelled: this is a consistency check
between two models that share the cost model, not a hardware figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run_script(device: str, out: Path, steps: int, width: int, batch: int, foreach: bool) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if device == "neuron":
        import neuron_profiler.emulator as emu
        from neuron_profiler import NEURON

        emu.enable(cores=1, chip="trn2", numerics=False)
        activities.append(NEURON)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * width, 4 * width),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * width, width),
    ).to(device)
    # foreach: None lets torch choose by device (a for-loop over the parameters on the CPU, the
    # _foreach_ ops on the neuron device); True runs the same ops on both
    opt = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, foreach=True if foreach else None
    )
    x = torch.randn(batch, width).to(device)
    y = torch.randn(batch, width).to(device)

    def step() -> None:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        loss.item()

    for _ in range(2):
        step()
    with profile(activities=activities, record_shapes=True) as prof:
        for i in range(steps):  # named as torch.profiler's schedule names its steps
            with record_function(f"ProfilerStep#{i}"):
                step()
    prof.export_chrome_trace(str(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--run", choices=("cpu", "neuron"))
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=1, help="run pairs, one row each")
    ap.add_argument(
        "--optimizer",
        choices=("foreach", "default"),
        default="foreach",
        help="foreach: the same optimizer ops on both devices; default: torch's choice per device",
    )
    ap.add_argument(
        "--host-allocator",
        choices=("cached", "default"),
        default="cached",
        help="cached: glibc keeps freed memory (no munmap), as a device's caching allocator does",
    )
    a = ap.parse_args()
    if a.run:
        run_script(a.run, Path(a.out), a.steps, a.width, a.batch, a.optimizer == "foreach")
        return
    rows = [_one_run(a) for _ in range(a.repeat)]
    if a.repeat == 1:
        print(json.dumps(rows[0], indent=1))
        return
    # each side's least-disturbed run (min over the runs: the host time a loaded machine
    # inflates least), and the spread of the pairs' own errors
    projected = min(r["projected_trn2_step_ms"] for r in rows)
    emulated = min(r["emulated_trn2_step_ms"] for r in rows)
    errors = sorted(r["error_pct"] for r in rows)
    summary = {
        "min_projected_trn2_step_ms": projected,
        "min_emulated_trn2_step_ms": emulated,
        "error_of_mins_pct": round(100 * (projected - emulated) / emulated, 1),
        "pair_errors_pct": errors,
        "median_pair_error_pct": errors[len(errors) // 2],
    }
    print(json.dumps({"runs": rows, "summary": summary}, indent=1))


# glibc settings that keep freed memory in the process: no mmap for large blocks, no trimming.
# Freeing a tensor then costs the host what a device's caching allocator costs it (next to
# nothing), not munmap's page-table work (25-47 ms a step for this model's 100 MB of gradients
# set to None by zero_grad, measured on the CPU run), which no device run has.
CACHED_HOST_ALLOCATOR = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**64 - 1)}


def _env(a: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if a.host_allocator == "cached":
        env.update(CACHED_HOST_ALLOCATOR)
    return env


def _one_run(a: argparse.Namespace) -> dict:
    """One CPU run and one emulated run, each in a fresh interpreter, back to back."""
    from neuron_profiler.analysis.projection import project
    from neuron_profiler.trace import load_trace

    with tempfile.TemporaryDirectory() as tmp:
        paths = {d: Path(tmp) / f"{d}.json" for d in ("cpu", "neuron")}
        for device, path in paths.items():
            args = ["--run", device, "--out", str(path), "--steps", str(a.steps)]
            args += ["--width", str(a.width), "--batch", str(a.batch), "--optimizer", a.optimizer]
            subprocess.run(
                [sys.executable, __file__, *args], check=True, capture_output=True, env=_env(a)
            )
        cpu, neuron = load_trace(paths["cpu"]), load_trace(paths["neuron"])
        projected = project(cpu, "trn2")
        # the emulated step as the device would see it: the emulator's own host work left out
        emulated = project(neuron, "same")
        by_op = _device_us_by_op(cpu, neuron)
    step = emulated.target.step_ms
    err = 100 * (projected.target.step_ms - step) / step
    return {
        "cpu_step_ms": round(projected.source.step_ms, 3),
        "projected_trn2_step_ms": round(projected.target.step_ms, 3),
        "projected_range_ms": [
            round(projected.target.low_ms, 3),
            round(projected.target.high_ms, 3),
        ],
        "emulated_trn2_step_ms": round(step, 3),
        "emulated_step_with_emulator_overhead_ms": round(emulated.source.step_ms, 3),
        "error_pct": round(err, 1),
        "projected_classes": {c.cls: round(c.target_ms, 3) for c in projected.classes},
        "emulated_classes": {c.cls: round(c.target_ms, 3) for c in emulated.classes},
        "device_us_per_step_by_op": by_op,
    }


def _device_us_by_op(cpu, neuron) -> dict:  # noqa: ANN001
    """Device time a step per op the script called (the outermost aten op around each launch):
    [projected from the CPU trace, emulated]."""
    import numpy as np

    from neuron_profiler.analysis.context import AnalysisContext, Options
    from neuron_profiler.analysis.graph_launches import launch_sites
    from neuron_profiler.analysis.offload import offload
    from neuron_profiler.analysis.replay import dependency_graph, graph_items
    from neuron_profiler.costmodel.chips import chip
    from neuron_profiler.trace import schema as S

    out: dict[str, list[float]] = {}
    ctx = AnalysisContext(cpu, Options(hta=False, tb=False))
    plan = offload(ctx, chip("trn2"))
    for name, ns in zip(plan.names.tolist(), plan.graph.duration.tolist(), strict=True):
        out.setdefault(str(name), [0.0, 0.0])[0] += ns / len(ctx.steps) / 1e3
    ectx = AnalysisContext(neuron, Options(hta=False, tb=False))
    graph = dependency_graph(ectx)
    sites = launch_sites(ectx, graph_items(ectx), graph.sync_start_ns)
    names = neuron.col(S.NAME_ID)[np.maximum(sites.op, 0)]
    for k, ns in enumerate(graph.duration.tolist()):
        name = neuron.strings[int(names[k])] if sites.op[k] >= 0 else "(no op)"
        out.setdefault(name, [0.0, 0.0])[1] += ns / len(ectx.steps) / 1e3
    return {k: [round(v[0], 1), round(v[1], 1)] for k, v in sorted(out.items())}


if __name__ == "__main__":
    main()
