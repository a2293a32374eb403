"""Issue 27, point 6(d), in one call on a GPU machine: the same workloads recorded on the CPU and
on CUDA with torch.profiler, each CPU trace projected onto the GPU it ran beside, against the
step measured there; each CUDA trace replayed on its own chip; ``analyze`` and ``diff`` on all::

    python bench/gpu_validation.py --out DIR                  # on the GPU machine (full size)
    python bench/gpu_validation.py --out DIR --scale tiny     # anywhere: the pipeline, small

Workloads (``WORKLOADS``): a GPT-2 small training step (transformers' ``GPT2LMHeadModel`` from a
config, random weights, no download), a ResNet-50 training step (torchvision, random
weights), a loop of tiny ops (launch-bound), a data stall (the host sleeps between steps), a
host sync (``.item()`` every step) and a CPU round trip (a tensor to the host and back each
step). Each runs in a fresh interpreter per device (``--child``), with ``record_shapes`` and
ProfilerStep steps; the step is also timed by the host clock (synchronised on CUDA).

Writes to DIR: ``summary.json`` and ``summary.md`` (per workload: the measured CPU and CUDA
steps, the CPU trace projected onto the GPU's chip and its error against the CUDA step, the
CUDA trace's replay error, whether ``analyze --json`` and ``diff --json`` ran) and
``traces.tar.gz`` (every trace, gzipped, for test data). Nothing is tuned per workload; the
error is the model's, measured.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("gpt2", "resnet50", "tiny_ops", "data_stall", "host_sync", "cpu_roundtrip")
# (full, tiny) sizes: the full ones are what issue 27 names; tiny ones check the pipeline
SIZES: dict[str, dict[str, Any]] = {
    "gpt2": {
        "full": {"layers": 12, "width": 768, "heads": 12, "vocab": 50257, "batch": 4, "seq": 256},
        "tiny": {"layers": 2, "width": 64, "heads": 4, "vocab": 512, "batch": 2, "seq": 32},
    },
    "resnet50": {"full": {"batch": 16, "size": 224}, "tiny": {"batch": 2, "size": 64}},
    "tiny_ops": {"full": {"ops": 200, "side": 64}, "tiny": {"ops": 40, "side": 16}},
    "data_stall": {
        "full": {"stall_s": 0.02, "width": 1024},
        "tiny": {"stall_s": 0.005, "width": 64},
    },
    "host_sync": {"full": {"width": 1024, "batch": 256}, "tiny": {"width": 64, "batch": 16}},
    "cpu_roundtrip": {"full": {"width": 1024, "batch": 256}, "tiny": {"width": 64, "batch": 16}},
}
WAIT, WARMUP = 1, 1  # profiler schedule before the recorded steps


# ---- the child: one workload on one device, recorded ------------------------------------------
def _mlp(torch: Any, width: int) -> Any:
    return torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    )


def build_step(torch: Any, name: str, size: dict[str, Any], device: str) -> Any:
    """A callable running one training step of workload ``name`` on ``device``."""
    torch.manual_seed(0)
    if name == "gpt2":
        import transformers

        cfg = transformers.GPT2Config(
            vocab_size=size["vocab"],
            n_positions=max(64, size["seq"]),
            n_embd=size["width"],
            n_layer=size["layers"],
            n_head=size["heads"],
        )
        model = transformers.GPT2LMHeadModel(cfg).to(device)
        ids = torch.randint(0, size["vocab"], (size["batch"], size["seq"]), device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step
    if name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(weights=None).to(device)
        x = torch.randn(size["batch"], 3, size["size"], size["size"], device=device)
        y = torch.randint(0, 1000, (size["batch"],), device=device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step() -> None:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step
    if name == "tiny_ops":
        x = torch.randn(size["side"], size["side"], device=device)

        def step() -> None:
            y = x
            for _ in range(size["ops"] // 2):
                y = torch.relu(y * 1.0001 + 0.0001)

        return step
    width = size["width"]
    model = _mlp(torch, width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(size.get("batch", 64), width, device=device)

    def train() -> Any:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if name == "data_stall":

        def step() -> None:
            time.sleep(size["stall_s"])  # the batch the loader has not made yet
            train()

        return step
    if name == "host_sync":

        def step() -> None:
            train().item()  # the host waits for the device's value (a logging line, say)
            train().item()

        return step
    if name == "cpu_roundtrip":

        def step() -> None:
            back = model(x).detach().cpu()  # to the host, an op there, and back
            x.copy_((back - back.mean()).to(device))
            train()

        return step
    raise SystemExit(f"unknown workload {name!r}")


def child(name: str, device: str, scale: str, steps: int, trace: Path) -> None:
    """Record ``steps`` ProfilerSteps of the workload; print the host-clock mean step (ms)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    step = build_step(torch, name, SIZES[name][scale], device)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    walls: list[float] = []
    with profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=steps),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
    ) as prof:
        for _ in range(WAIT + WARMUP + steps):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            walls.append(time.perf_counter() - t0)
            prof.step()
    recorded = walls[WAIT + WARMUP :]
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(
        json.dumps(
            {"wall_step_ms": 1000 * sum(recorded) / len(recorded), "device_name": device_name}
        )
    )


# ---- the parent: run the children, project, analyse, write the summary --------------------------
def run_child(name: str, device: str, args: argparse.Namespace, trace: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, device, "--scale", args.scale]
    cmd += ["--steps", str(args.steps), "--trace", str(trace)]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    )
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    if proc.returncode != 0 or not trace.exists():
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def cli(*argv: str) -> dict[str, Any]:
    """``neuron-prof`` as a user runs it: exit code and the JSON document (or the error)."""
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if proc.returncode != 0:
        return {"exit": proc.returncode, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"exit": 0, "document": json.loads(proc.stdout)}


def projected(trace: Path, chip: str) -> dict[str, Any]:
    got = cli("project", str(trace), "--chip", chip, "--json")
    if got["exit"]:
        return got
    doc = got["document"]
    return {"exit": 0, "source": doc["source"], "target": doc["target"]}


def workload_row(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": name, "size": SIZES[name][args.scale]}
    traces = {d: out / f"{name}-{d}.pt.trace.json" for d in args.devices}
    for device, trace in traces.items():
        row[device] = run_child(name, device, args, trace)
        print(f"{name} on {device}: {row[device]}", flush=True)
    ok = {d: t for d, t in traces.items() if "error" not in row[d]}
    for device, trace in ok.items():
        row[device]["analyze_exit"] = cli("analyze", "--json", str(trace))["exit"]
        row[device]["replay"] = projected(trace, "same")
    if "cpu" in ok and ("cuda" in ok or args.chip):  # (no GPU: the projection alone, --chip)
        chip = args.chip or _chip_of(row["cuda"]["replay"])
        row["projection"] = projected(ok["cpu"], chip) if chip else {"error": "GPU chip unknown"}
    if "cpu" in ok and "cuda" in ok:
        target = row.get("projection", {}).get("target", {}).get("step_ms")
        measured = row["cuda"]["replay"].get("source", {}).get("step_ms")
        if target and measured:
            row["projection"]["measured_step_ms"] = measured
            row["projection"]["error_pct"] = 100.0 * (target - measured) / measured
        row["diff_exit"] = cli("diff", str(ok["cpu"]), str(ok["cuda"]), "--json")["exit"]
    return row


def _chip_of(replay: dict[str, Any]) -> str | None:
    return replay.get("source", {}).get("chip") if replay.get("exit") == 0 else None


def summary_md(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"scale {args.scale}, {args.steps} recorded steps each; devices {', '.join(args.devices)}",
        "",
        "| workload | CPU step ms | CUDA step ms (trace) | CPU -> GPU projected ms | error | "
        "CUDA replay error | analyze / diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cpu, cuda, proj = r.get("cpu", {}), r.get("cuda", {}), r.get("projection", {})
        replay = cuda.get("replay", {})
        replay_err = None
        if replay.get("exit") == 0 and replay["source"]["step_ms"]:
            replay_err = 100 * (replay["target"]["step_ms"] / replay["source"]["step_ms"] - 1)
        lines.append(
            f"| {r['workload']} | {_num(_step_ms(cpu), '.3f')} | {_num(_step_ms(cuda), '.3f')} | "
            f"{_num(proj.get('target', {}).get('step_ms'), '.3f')} | "
            f"{_num(proj.get('error_pct'), '+.1f', '%')} | {_num(replay_err, '+.1f', '%')} | "
            f"{cpu.get('analyze_exit', '-')},{cuda.get('analyze_exit', '-')} / "
            f"{r.get('diff_exit', '-')} |"
        )
    return "\n".join(lines) + "\n"


def _step_ms(side: dict[str, Any]) -> float | None:
    """A device's recorded mean step (its replay's source), None where it did not run."""
    return side.get("replay", {}).get("source", {}).get("step_ms")


def _num(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def pack(out: Path) -> None:
    """Every trace gzipped into one ``traces.tar.gz`` (the device tool returns few files)."""
    with tarfile.open(out / "traces.tar.gz", "w") as tar:
        for trace in sorted(out.glob("*.pt.trace.json")):
            data = gzip.compress(trace.read_bytes(), 9)
            info = tarfile.TarInfo(trace.name + ".gz")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            trace.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scale", choices=("full", "tiny"), default="full")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--chip",
        help="the GPU's chip profile (default: from its trace; without a GPU: project onto it)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per child, seconds")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "DEVICE"))
    parser.add_argument("--trace", type=Path)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.scale, args.steps, args.trace)
        return
    if args.out is None:
        parser.error("--out DIR is needed")
    import torch

    args.devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [workload_row(name, args, args.out) for name in args.workloads.split(",") if name]
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1, default=str))
    text = summary_md(rows, args)
    (args.out / "summary.md").write_text(text)
    print(text)
    pack(args.out)


if __name__ == "__main__":
    main()
