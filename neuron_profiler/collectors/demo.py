"""The demo workload behind ``neuron-prof demo``: a small transformer trained on the emulated
device under ``torch.profiler`` with the NEURON collector::

    result = run_demo(DemoConfig(out_dir=Path("runs/demo")))
    print(result.trace_path, result.summary_lines())   # what ran; its figures: the analyzer's

It contains, on purpose, the two things a profile should make obvious: a slow data pipeline (a
``torch.utils.data.DataLoader``, ``num_workers=0``, over a dataset whose items take a modelled
loading time: the device idles while the host loads the next batch, which the analyzer reports
as ``data_loading``), and one op the device does not support (``bincount``: a CPU fallback
with its copies). With ``cores > 1`` it trains data-parallel in one process: one replica of the
model per NeuronCore, each on its slice of the batch, gradients averaged over the cores with
device-to-device copies (what DataParallel-style code does without a process group).

The demo computes no figure of its own (device time, top ops, fallback calls, the data step):
those are the analyzer's, on the trace written (``neuron-prof demo`` ends with its report), so
the demo cannot show two different figures for the same thing.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DemoConfig:
    """Args: out_dir: where tensorboard_trace_handler writes; steps: profiled (active) steps;
    cores/chip/speed_factor: the emulated device; slow_data_ms: the modelled loading time of
    one batch (the deliberate host stall, spread over its items);
    numerics: False (default) is timing mode: device ops are not computed, so the host launches
    at a real framework's pace and a Trainium-sized model is device-bound at speed factor 1, as
    on the chip; True computes every result on the host (numerics mode: a small model, since the
    host's math is far slower than the chip)."""

    out_dir: Path = Path("runs/demo")
    steps: int = 3
    cores: int = 1
    chip: str = "trn2"
    speed_factor: float = 1.0
    slow_data_ms: int = 20
    numerics: bool = False


@dataclass(frozen=True)
class DemoResult:
    """What ran, not what it cost (the analyzer's report says that). Args: trace_path: the
    trace written; cores: NeuronCores the work ran on; numerics: the emulator's mode;
    metadata: the collector session's trace metadata."""

    trace_path: Path
    cores: int = 1
    numerics: bool = False
    metadata: dict[str, str] = field(default_factory=dict)

    def summary_lines(self) -> list[str]:
        cores = (
            "1 NeuronCore"
            if self.cores == 1
            else f"{self.cores} NeuronCores (one model replica each, gradients averaged)"
        )
        mode = (
            "mode: numerics (results computed on the host; device timings modelled)"
            if self.numerics
            else "mode: timing (results not computed; device timings modelled, Trainium-like)"
        )
        return [
            f"trace: {self.trace_path}",
            mode,
            f"ran on {cores}",
            "planted on purpose: a slow DataLoader (the device waits for each batch) and a CPU",
            "  fallback (bincount, with its copies); the analyzer's report measures both",
        ]


def _model(torch, vocab: int, dim: int):
    layer = torch.nn.TransformerEncoderLayer(
        dim, nhead=4, dim_feedforward=2 * dim, batch_first=True, dropout=0.0
    )
    return torch.nn.ModuleDict(
        {
            "emb": torch.nn.Embedding(vocab, dim),
            "enc": torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
            "head": torch.nn.Linear(dim, vocab),
        }
    )


def _dataset(torch: Any, items: int, seq: int, vocab: int, item_ms: float) -> Any:
    """Token sequences whose loading takes ``item_ms`` each (a modelled read and decode)."""

    class SlowTokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return items

        def __getitem__(self, i: int) -> Any:
            time.sleep(item_ms / 1e3)
            return torch.randint(0, vocab, (seq,))

    return SlowTokens()


def _average_gradients(torch: Any, replicas: list[Any]) -> None:
    """Mean of each parameter's gradient over the replicas, written back to every replica:
    copies to core 0, a sum there, copies back (device-to-device DMA on the emulated device)."""
    with torch.no_grad():
        for params in zip(*(r.parameters() for r in replicas), strict=True):
            grads = [p.grad for p in params]
            mean = grads[0].clone()
            for g in grads[1:]:
                mean += g.to(mean.device)
            mean /= len(grads)
            for g in grads:
                g.copy_(mean)


def run_demo(cfg: DemoConfig) -> DemoResult:
    """Train a few steps with a wait/warmup/active schedule; one trace for the active steps.
    Raises CollectorUnavailableError (from ``collectors.require``) when NEURON cannot collect:
    a demo without device events shows nothing."""
    from neuron_profiler import collectors, emulator

    collectors.require()  # first: without the collector the demo stops before any device work
    emulator.enable(
        cores=cfg.cores, chip=cfg.chip, speed_factor=cfg.speed_factor, numerics=cfg.numerics
    )
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    neuron = collectors.NEURON
    devices = [torch.device("neuron", i) for i in range(cfg.cores)]
    # timing mode: a model whose step is device-bound on a NeuronCore (~1 TFLOP per step, the
    # host's work a fraction of it even on a loaded machine);
    # numerics mode: a small one (the host computes every result)
    vocab, dim, seq, batch = (
        (256, 64, 32, max(8, cfg.cores)) if cfg.numerics else (8192, 1024, 512, max(32, cfg.cores))
    )
    model = _model(torch, vocab, dim)
    replicas = [copy.deepcopy(model).to(dev) for dev in devices]  # identical weights
    opts = [torch.optim.AdamW(r.parameters(), lr=1e-3) for r in replicas]
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    before = set(cfg.out_dir.glob("*.pt.trace.json*"))

    def forward(replica: Any, tokens: Any) -> tuple[Any, Any]:
        logits = replica["head"](replica["enc"](replica["emb"](tokens)))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))
        return logits, loss

    loader = torch.utils.data.DataLoader(  # deliberately slow: loads on the training thread
        _dataset(torch, (cfg.steps + 2) * batch, seq, vocab, cfg.slow_data_ms / batch),
        batch_size=batch,
        num_workers=0,
    )
    batches = iter(loader)

    def step() -> None:
        tokens = next(batches)
        shards = [s.to(dev) for s, dev in zip(tokens.tensor_split(cfg.cores), devices, strict=True)]
        for opt in opts:
            opt.zero_grad()
        outputs = [forward(r, tokens) for r, tokens in zip(replicas, shards, strict=True)]
        for _, loss in outputs:
            loss.backward()
        if cfg.cores > 1:
            _average_gradients(torch, replicas)
        for opt in opts:
            opt.step()
        logits, loss = outputs[0]
        torch.bincount(logits.argmax(-1).reshape(-1), minlength=vocab)  # a CPU fallback
        loss.item()

    sched = schedule(wait=1, warmup=1, active=cfg.steps, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(str(cfg.out_dir), worker_name="demo")
    with profile(
        activities=[ProfilerActivity.CPU, neuron], schedule=sched, on_trace_ready=handler
    ) as prof:
        with warnings.catch_warnings():
            # timing mode: the fallback and the logged loss read values that are not computed,
            # on purpose (the demo says its mode); the warning is for users' own programs
            warnings.simplefilter("ignore", emulator.ModelledValueWarning)
            for _ in range(cfg.steps + 2):
                step()
                prof.step()
    written = sorted(
        set(cfg.out_dir.glob("*.pt.trace.json*")) - before, key=lambda p: p.stat().st_mtime
    )
    session = collectors.last_session()
    return DemoResult(
        trace_path=written[-1] if written else cfg.out_dir,
        cores=cfg.cores,
        numerics=cfg.numerics,
        metadata=dict(session.metadata) if session is not None else {},
    )
