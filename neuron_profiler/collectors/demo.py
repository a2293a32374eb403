"""The demo workload behind ``neuron-prof demo``: a small transformer trained on the emulated
device under ``torch.profiler`` with the NEURON collector::

    result = run_demo(DemoConfig(out_dir=Path("runs/demo")))
    print(result.trace_path, result.summary_lines())

It contains, on purpose, the two things a profile should make obvious: a host-side data step that
sleeps (the device idles), and one op the device does not support (``bincount``: a CPU fallback
with its copies).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class DemoConfig:
    """Args: out_dir: where tensorboard_trace_handler writes; steps: profiled (active) steps;
    cores/chip/speed_factor: the emulated device; slow_data_ms: the deliberate host stall."""

    out_dir: Path = Path("runs/demo")
    steps: int = 3
    cores: int = 1
    chip: str = "trn2"
    speed_factor: float = 1.0
    slow_data_ms: int = 20


@dataclass(frozen=True)
class OpTime:
    name: str
    calls: int
    device_us: float
    cpu_us: float


@dataclass(frozen=True)
class DemoResult:
    """Args: trace_path: the trace written; device_us / cpu_us: totals over the profiled steps;
    top: ops by device time; fallbacks: CPU-fallback calls; data_step_us: the host data step."""

    trace_path: Path
    device_us: float
    cpu_us: float
    data_step_us: float
    fallbacks: int
    top: list[OpTime] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    def summary_lines(self) -> list[str]:
        lines = [f"trace: {self.trace_path}",
                 f"device time {self.device_us / 1e3:.3f} ms (modelled) vs host op time "
                 f"{self.cpu_us / 1e3:.3f} ms over the profiled steps",
                 f"host data step: {self.data_step_us / 1e3:.3f} ms "
                 "(the device waits for it: look for the gap on the NeuronCore rows)",
                 f"CPU fallbacks: {self.fallbacks} (rows named 'CPU fallback: ...', with their "
                 "DMA copies)", "top ops by device time:"]
        lines += [f"  {o.name:<40} {o.calls:>5} calls {o.device_us:>10.1f} us device"
                  for o in self.top]
        return lines


def _model(torch, vocab: int, dim: int):
    layer = torch.nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=2 * dim,
                                             batch_first=True, dropout=0.0)
    return torch.nn.ModuleDict({"emb": torch.nn.Embedding(vocab, dim),
                                "enc": torch.nn.TransformerEncoder(layer, num_layers=2,
                                                                   enable_nested_tensor=False),
                                "head": torch.nn.Linear(dim, vocab)})


def run_demo(cfg: DemoConfig) -> DemoResult:
    """Train a few steps with a wait/warmup/active schedule; one trace for the active steps.
    Raises CollectorUnavailableError (from ``collectors.require``) when NEURON cannot collect:
    a demo without device events shows nothing."""
    from neuron_profiler import emulator

    emulator.enable(cores=cfg.cores, chip=cfg.chip, speed_factor=cfg.speed_factor)
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from neuron_profiler import collectors

    collectors.require()
    neuron = collectors.NEURON
    dev = torch.device("neuron")
    vocab, dim, seq, batch = 256, 64, 32, 8
    model = _model(torch, vocab, dim).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    before = set(cfg.out_dir.glob("*.pt.trace.json*"))

    def step() -> None:
        with record_function("data_step"):  # deliberately slow host-side data preparation
            time.sleep(cfg.slow_data_ms / 1e3)
            tokens = torch.randint(0, vocab, (batch, seq)).to(dev)
        opt.zero_grad()
        hidden = model["enc"](model["emb"](tokens))
        logits = model["head"](hidden)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))
        loss.backward()
        opt.step()
        torch.bincount(logits.argmax(-1).reshape(-1), minlength=vocab)  # a CPU fallback
        loss.item()

    sched = schedule(wait=1, warmup=1, active=cfg.steps, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(str(cfg.out_dir), worker_name="demo")
    with profile(activities=[ProfilerActivity.CPU, neuron], schedule=sched,
                 on_trace_ready=handler) as prof:
        for _ in range(cfg.steps + 2):
            step()
            prof.step()
    written = sorted(set(cfg.out_dir.glob("*.pt.trace.json*")) - before,
                     key=lambda p: p.stat().st_mtime)
    events = prof.key_averages()
    cpu_ops = [e for e in events if e.device_type == DeviceType.CPU]
    top = sorted((e for e in cpu_ops if e.self_device_time_total > 0 and "::" in e.key),
                 key=lambda e: -e.self_device_time_total)[:8]
    session = collectors.last_session()
    return DemoResult(
        trace_path=written[-1] if written else cfg.out_dir,
        device_us=sum(e.self_device_time_total for e in cpu_ops),
        cpu_us=sum(e.self_cpu_time_total for e in cpu_ops if e.key.startswith("aten::")),
        data_step_us=sum(e.cpu_time_total for e in cpu_ops if e.key == "data_step"),
        fallbacks=sum(e.count for e in events if e.key.startswith("CPU fallback: ")),
        top=[OpTime(e.key, e.count, e.self_device_time_total, e.self_cpu_time_total)
             for e in top],
        metadata=dict(session.metadata) if session is not None else {})
