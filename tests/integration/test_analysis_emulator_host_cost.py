"""Honest host cost (issue 24, point 3): on a tiny GPT-2-like training step in timing mode, the
analyzer's host-bound verdict matches what the modelled framework launch cost predicts.

The prediction is read from what torch itself records, not from the emulator's overhead spans:
per step, the host time outside the Python-subclass dispatch (``PythonSubclass`` spans: the
program, autograd, the dispatcher, real on any backend) plus ``host_launch_ns`` per kernel the
step launched. The device idle that host time leaves (less its busy time and the host syncs'
idle) is the host-bound launch time a device with that launch cost would show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.analysis import analyze  # noqa: E402
from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402

# The verdict against the prediction. Measured on this 2-core machine, idle, 4 runs each
# interleaved: 0.89-0.99 at be2d48a and 0.90-0.96 after it; in clean-clone CI runs 0.86-0.89 at
# worst. The prediction reads the emulator's share from torch's PythonSubclass rows only, so
# whatever the emulator does outside them (metadata queries answered in Python, priced as
# emulator overhead) it counts as framework time: the verdict sits below it (a reading, not
# yet measured op by op). 15% holds that; the second check keeps its 30% margin.
TOLERANCE = 0.15
DISCOUNT_MARGIN = 0.30
SCRIPT = r"""
import sys, warnings
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, chip="trn2", numerics=False)
warnings.simplefilter("ignore")
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule
F = torch.nn.functional

class Block(torch.nn.Module):  # GPT-2's: pre-norm causal attention and a GELU MLP
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=512, d=64, layers=2, heads=4, positions=64):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(positions, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)
    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))

torch.manual_seed(0)
dev = torch.device("neuron:0")
model = TinyGPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 512, (2, 32)).to(dev)

def step():
    opt.zero_grad()
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 512), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    loss.item()

for _ in range(3):
    step()
with profile(activities=[ProfilerActivity.CPU, NEURON],
             schedule=schedule(wait=0, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as p:
    for _ in range(4):
        step()
        p.step()
"""


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


RUNS = 3  # a loaded machine preempts the process inside ops: the best of a few runs is judged


def _trace(path: Path):  # noqa: ANN202
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path, analyze(load_trace(path))


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return _trace(tmp_path_factory.mktemp("host_cost") / "trace.json")


def _predicted_host_us(path: Path) -> list[tuple[float, float, int]]:
    """Per step: (step wall us, predicted host us, kernels launched), from torch's own rows."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    launch_us = chip("trn2").host_launch_ns / 1e3
    out = []
    for st in steps:
        a, b = st["ts"], st["ts"] + st["dur"]
        dispatch = [
            (max(e["ts"], a), min(e["ts"] + e["dur"], b))
            for e in events
            if e["name"] == "PythonSubclass" and a <= e["ts"] < b
        ]
        kernels = sum(1 for e in events if e.get("cat") == "kernel" and a <= e["ts"] < b)
        out.append((st["dur"], st["dur"] - _union_us(dispatch) + kernels * launch_us, kernels))
    return out


def test_host_bound_verdict_matches_the_modelled_launch_cost(traced, tmp_path: Path) -> None:  # noqa: ANN001
    """Over the profiled steps (summed: a preemption inside one op's boundary moves one step's
    figure, not the run's): host-bound launch time = predicted host time less the device's busy
    time and the other causes' idle, within 15% (TOLERANCE: why). The boundary is calibrated once, at its least
    cost; on a machine busy with other processes a run's real boundary can cost more (which
    reads as host-bound time): up to ``RUNS`` runs, the closest one judged."""
    runs = [_verdict(*traced)]
    while len(runs) < RUNS and abs(runs[-1][0] / runs[-1][1] - 1) > TOLERANCE:
        runs.append(_verdict(*_trace(tmp_path / f"trace{len(runs)}.json")))
    hbl, want, overhead = min(runs, key=lambda r: abs(r[0] / r[1] - 1))
    assert hbl == pytest.approx(want, rel=TOLERANCE), runs
    # the discount is what makes it so: without it the verdict would be off by far more
    assert hbl + overhead > (1 + DISCOUNT_MARGIN) * want


def _verdict(path: Path, report) -> tuple[float, float, float]:  # noqa: ANN001
    """(host-bound launch us from the analyzer, the prediction, emulator overhead us)."""
    (device,) = report.idle.devices
    predicted = _predicted_host_us(path)
    assert len(predicted) == len(device.per_step_by_cause_ns) == 3
    hbl = want = overhead = 0.0
    for i, (wall_us, host_us, kernels) in enumerate(predicted):
        causes = device.per_step_by_cause_ns[i]
        overhead_us = device.per_step_emulator_overhead_ns[i] / 1e3
        other_idle_us = sum(v for k, v in causes.items() if k != "host_bound_launch") / 1e3
        # the device's busy time in the step: the window less idle and emulator overhead
        busy_us = wall_us - overhead_us - sum(causes.values()) / 1e3
        assert kernels > 100
        hbl += causes["host_bound_launch"] / 1e3
        want += host_us - busy_us - other_idle_us
        overhead += overhead_us
    return hbl, want, overhead


def test_emulator_internals_never_named_as_host_activity(traced) -> None:  # noqa: ANN001
    _, report = traced
    named = [h for gap in report.idle.longest for h in gap.host_activity]
    assert named
    assert not [h for h in named if h in ("PythonSubclass", "PythonDispatchMode")]
    assert report.idle.emulator_overhead_ns > 0


def test_host_spans_nest_and_the_overhead_reaches_past_its_span(traced) -> None:  # noqa: ANN001
    """Every host thread's slices nest (the Trace Event Format's rule, Perfetto's tracks): the
    dispatch-overhead span is the timed dispatch, inside the op's PythonSubclass span and around
    its runtime call; the boundary and the framework's launch cost reach past it as args, which
    the analyzer adds back (its discount exceeds the drawn spans by their sum)."""
    path, report = traced
    events = json.loads(path.read_text())["traceEvents"]
    by_thread: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in ("kernel", "gpu_memcpy"):
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    crossed = []
    for rows in by_thread.values():
        stack: list = []
        for e in sorted(rows, key=lambda e: (e["ts"], -e["dur"])):
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][1] <= start + 0.002:  # µs doubles: ns rounding at touches
                stack.pop()
            if stack and end > stack[-1][1] + 0.002:
                crossed.append((stack[-1][2]["name"], e["name"]))
            stack.append((start, end, e))
    assert crossed == []
    dispatch = [e for e in events if e.get("args", {}).get("emulator overhead") == "dispatch"]
    before = [e["args"].get("overhead before (ns)", 0) for e in dispatch]
    after = [e["args"].get("overhead after (ns)", 0) for e in dispatch]
    assert dispatch and max(before) > 0 and min(after) < 0  # launch cost taken from the end
