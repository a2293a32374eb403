"""CPU fallbacks of the emulated device, profiled with ``with_stack=True``: each group's native
time equals a roofline computed here from the op's shapes and the peaks the trace gives for its
dtype, recoverable = measured - native, and each finding names the function of this file that
called the op (the file runs itself as the profiled script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from neuron_profiler.analysis import analyze  # noqa: E402
from neuron_profiler.reports.json_report import schema_text, to_document  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

N_IDX, BINS, M, CALLS = 50_000, 128, 256, 2
HERE = str(Path(__file__).resolve())


def count_tokens(idx):  # noqa: ANN001, ANN201 - the call site the bincount finding must name
    return torch.bincount(idx)


def invert(a):  # noqa: ANN001, ANN201
    return torch.linalg.inv(a)


def read_total(x):  # noqa: ANN001, ANN201 - the call site of the .item() sync
    return x.sum().item()


def workload(out: str) -> None:
    from neuron_profiler import emulator

    emulator.enable(cores=1, chip="trn2", speed_factor=1.0)
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    dev = torch.device("neuron:0")
    idx = (torch.arange(N_IDX) % BINS).to(dev)
    a = (torch.randn(M, M) + M * torch.eye(M)).to(dev)
    w = torch.randn(M, M).to(dev)
    with profile(activities=[ProfilerActivity.CPU, NEURON], with_stack=True) as prof:
        for _ in range(CALLS):
            y = w @ w @ w
            counts = count_tokens(idx)
            y = y @ invert(a)
            read_total(y + counts[:1].float())
    prof.export_chrome_trace(out)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("native") / "trace.json"
    proc = subprocess.run(
        [sys.executable, HERE, str(path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path


@pytest.fixture(scope="module")
def report(trace_path: Path):  # noqa: ANN201
    return analyze(load_trace(trace_path))


def _roofline_ns(flops: float, nbytes: float, tflops: float, hbm_gbps: float) -> float:
    return max(flops / (tflops * 1e12), nbytes / (hbm_gbps * 1e9)) * 1e9


def test_native_time_is_the_roofline_of_the_ops_shapes(report, trace_path: Path) -> None:  # noqa: ANN001
    props = json.loads(trace_path.read_text())["deviceProperties"][0]
    peaks, hbm = props[V.PROP_PEAK_TFLOPS], props[V.PROP_HBM_GBPS]
    # bincount: one flop per input element, int64 in and out, a vector op (no int64 figure:
    # the engine's float32 one); linalg_inv_ex: LU + inverse, 2 n^3, float32 on TensorE, reads
    # the matrix, writes the inverse and an int32 info scalar
    want = {
        "aten::bincount": _roofline_ns(N_IDX, (N_IDX + BINS) * 8, peaks["VectorE"]["float32"], hbm),
        "aten::linalg_inv_ex": _roofline_ns(
            2 * M**3, 2 * M * M * 4 + 4, peaks["TensorE"]["float32"], hbm
        ),
    }
    groups = {g.op: g for g in report.findings.fallbacks}
    assert set(groups) == set(want)
    for op, per_call in want.items():
        g = groups[op]
        assert g.calls == CALLS and not g.inferred
        assert g.native_ns == pytest.approx(CALLS * per_call, abs=CALLS)
        measured = g.idle_ns + g.d2h_ns + g.h2d_ns
        assert g.recoverable_ns == max(0, measured - g.native_ns) and g.recoverable_ns > 0


def _is_site_of(call_site: str, fn) -> bool:  # noqa: ANN001
    """``call_site`` names this file (as the profiler spells the script: its path or a tail of
    it) and ``fn`` at its first line (what python_function rows record)."""
    file, _, rest = call_site.rpartition(":")
    return (
        bool(file)
        and HERE.endswith(file)
        and rest == (f"{fn.__code__.co_firstlineno} {fn.__name__}")
    )


def test_findings_name_the_python_call_site(report) -> None:  # noqa: ANN001
    groups = {g.op: g for g in report.findings.fallbacks}
    assert _is_site_of(groups["aten::bincount"].call_site, count_tokens)
    assert _is_site_of(groups["aten::linalg_inv_ex"].call_site, invert)
    found = {f.kind: f for f in report.findings.findings}
    assert _is_site_of(found["cpu_fallback:aten::bincount"].call_site, count_tokens)
    (item,) = [g for g in report.findings.syncs if g.name == "aten::item"]
    assert item.calls == CALLS and _is_site_of(item.call_site, read_total)
    assert item.d2h_count == CALLS and item.d2h_bytes == CALLS * 4  # one float32 each


def test_call_sites_in_json_and_terminal(report) -> None:  # noqa: ANN001
    import io

    import jsonschema
    from rich.console import Console

    from neuron_profiler.reports.terminal import render_terminal

    doc = json.loads(json.dumps(to_document([report])))
    jsonschema.validate(doc, json.loads(schema_text()))
    fallbacks = {g["op"]: g for g in doc["traces"][0]["fallbacks"]}
    assert fallbacks["aten::bincount"]["call_site"].endswith("count_tokens")
    assert fallbacks["aten::bincount"]["native_ms"] > 0
    console = Console(file=io.StringIO(), width=400)
    render_terminal([report], console=console)
    text = console.file.getvalue()
    site = fallbacks["aten::bincount"]["call_site"]
    assert _is_site_of(site, count_tokens) and f"at {site}" in text


if __name__ == "__main__":
    workload(sys.argv[1])
