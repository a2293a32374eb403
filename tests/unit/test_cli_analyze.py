"""``neuron-prof analyze``: JSON valid against the shipped schema (and produced without pandas),
the terminal report within the piped width (120 columns), exit codes 0 / 1 (--fail-on) / 2
(bad input, good inputs still analysed), directories with files that are not traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.json_report import SCHEMA_VERSION, schema_text
from neuron_profiler.reports.terminal import PIPED_WIDTH
from neuron_profiler.trace import EventKind, TraceBuilder
from neuron_profiler.trace import vocabulary as V

US = 1000


def small_trace(path: Path, *, steps: bool = True) -> Path:
    b = TraceBuilder()
    if steps:
        for n, (lo, hi) in enumerate(((0, 500), (500, 1000))):
            b.add(
                name=f"ProfilerStep#{n + 1}",
                ts_ns=lo * US,
                dur_ns=(hi - lo) * US,
                kind=EventKind.USER_ANNOTATION,
                cat="user_annotation",
                pid=9,
                tid=9,
            )
    for corr, (lo, hi) in enumerate(((0, 100), (300, 400), (800, 950)), start=1):
        b.add(
            name="nrt launch: mm",
            ts_ns=(lo - 10) * US if lo else 0,
            dur_ns=5 * US,
            kind=EventKind.RUNTIME,
            cat=V.CAT_RUNTIME,
            pid=9,
            tid=9,
            args={V.ARG_CORRELATION: corr},
        )
        b.add(
            name="TensorE: mm",
            ts_ns=lo * US,
            dur_ns=(hi - lo) * US,
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=1,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 1, V.ARG_CORRELATION: corr},
        )
    b.process_names[0] = V.core_process_name(0)
    write_chrome_trace(b.build(), path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_validates_against_the_shipped_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["analyze", "--json", str(small_trace(tmp_path / "a.json"))], capsys)
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["schema_version"] == SCHEMA_VERSION
    trace = doc["traces"][0]
    assert [s["step"] for s in trace["steps"]] == ["1", "2"]
    assert trace["idle"]["devices"][0]["label"] == "NeuronCore 0"
    # tb-profiler drops a last step with under 80% of the previous step's device events (1 < 2)
    assert [r["step"] for r in trace["tb_profiler_breakdown"]] == ["1"]


def test_json_never_imports_pandas(tmp_path: Path) -> None:
    path = small_trace(tmp_path / "a.json")
    code = (
        "import sys\nfrom neuron_profiler.cli.main import main\n"
        f"rc = main(['analyze', '--json', {str(path)!r}])\n"
        "print('pandas' in sys.modules, 'torch' in sys.modules, rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False False 0"


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2,
    reason="counts threads in /proc (Linux); OpenBLAS starts no extra thread on one core",
)
def test_analyze_starts_no_blas_threads(tmp_path: Path) -> None:
    """numpy's OpenBLAS would start a thread per core that spins beside the analysis (which
    never calls BLAS): after ``analyze``, run with no OPENBLAS_NUM_THREADS of the user's, the
    process holds its main thread only."""
    path = small_trace(tmp_path / "a.json")
    code = (
        "import os, sys\nfrom neuron_profiler.cli.main import main\n"
        f"rc = main(['analyze', '--json', {str(path)!r}])\n"
        "print('numpy' in sys.modules, len(os.listdir('/proc/self/task')), rc)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip().splitlines()[-1] == "True 1 0"


def test_no_steps_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["analyze", str(small_trace(tmp_path / "a.json", steps=False))], capsys)
    assert code == 0 and "no ProfilerStep" in out
    assert max(len(line) for line in out.splitlines()) <= PIPED_WIDTH


def test_bad_and_good_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = small_trace(tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, out, err = run(
        ["analyze", "--json", str(good), str(bad), str(tmp_path / "missing.json")], capsys
    )
    assert code == 2
    doc = json.loads(out)
    assert len(doc["traces"]) == 1 and len(doc["errors"]) == 2
    named = [line for line in err.splitlines() if line.startswith("neuron-prof: error: /")]
    assert len(named) == 2 and str(bad) in named[0]


def test_directory_skips_files_that_are_not_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small_trace(tmp_path / "w.pt.trace.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "config.json").write_text('{"lr": 0.1}')
    code, out, err = run(["analyze", "--json", str(tmp_path)], capsys)
    assert code == 0 and len(json.loads(out)["traces"]) == 1
    assert "config.json: skipped, not a trace" in err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("rank1.pt.trace.json", ""),  # named as torch names its traces: a trace, but empty
        ("rank1.json", '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur"'),  # cut off
    ],
    ids=["empty-trace-name", "truncated"],
)
def test_directory_counts_broken_traces_as_errors(
    name: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under a directory only files that are no trace at all are skipped: a broken trace is an
    error (exit 2), so a CI gate over a run directory does not pass on lost ranks."""
    small_trace(tmp_path / "rank0.pt.trace.json")
    (tmp_path / name).write_text(text)
    code, out, err = run(["analyze", "--json", str(tmp_path)], capsys)
    assert code == 2 and len(json.loads(out)["traces"]) == 1
    assert f"neuron-prof: error: {tmp_path / name}: " in err and "skipped" not in err


def test_one_bad_input_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, out, err = run(["analyze", str(bad)], capsys)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"neuron-prof: error: {bad}: invalid JSON")


def test_fail_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(small_trace(tmp_path / "a.json"))
    code, out, err = run(["analyze", "--json", "--fail-on", "idle_pct>30", path], capsys)
    assert code == 1 and "idle_pct>30 breached" in err
    assert json.loads(out)["fail_on"][0]["metric"] == "idle_pct"
    code, _, err = run(["analyze", "--fail-on", "idle_pct>99", path], capsys)
    assert code == 0 and "breached" not in err
    code, _, err = run(["analyze", "--fail-on", "nonsense>1", path], capsys)
    assert code == 2 and "unknown metric" in err


def _host_only(path: Path) -> Path:
    """Two steps of host ops, no device at all (a CPU-only torch.profiler trace)."""
    b = TraceBuilder()
    for n, lo in enumerate((0, 500)):
        b.add(
            name=f"ProfilerStep#{n + 1}",
            ts_ns=lo * US,
            dur_ns=500 * US,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=9,
            tid=9,
        )
        b.add(name="aten::mm", ts_ns=(lo + 10) * US, dur_ns=400 * US, pid=9, tid=9)
    write_chrome_trace(b.build(), path)
    return path


def test_device_metrics_of_a_trace_without_device_are_null_and_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CPU-only trace had ``idle_pct`` 0.0: ``--fail-on idle_pct<1`` failed it, and a
    ``>30`` gate passed it, on a device that does not exist."""
    cpu = _host_only(tmp_path / "cpu.json")
    code, out, err = run(["analyze", "--json", str(cpu), "--fail-on", "idle_pct<1"], capsys)
    assert code == 0 and "fail-on: idle_pct<1 not judged (idle_pct: no device time" in err
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    m = doc["traces"][0]["metrics"]
    assert m["step_ms"] == 0.5 and m["idle_pct"] is None and m["host_sync_ms_per_step"] is None
    # beside a trace with a device, the CPU-only one is left out of the worst: that one decides
    dev = small_trace(tmp_path / "dev.json")
    code, _, err = run(["analyze", str(cpu), str(dev), "--fail-on", "idle_pct<1"], capsys)
    assert code == 0 and "not judged" not in err
    code, _, err = run(["analyze", str(cpu), str(dev), "--fail-on", "idle_pct>30"], capsys)
    assert code == 1 and "idle_pct>30 breached" in err


def test_a_sync_finding_names_its_call_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The row read "host sync cudaDeviceSynchronize (1 calls) (cudaDeviceSynchronize)": the
    host op appended after a title that already names it, and "1 calls"."""
    from trace_factory import MM_ARGS, Build

    b = Build().step(1, 0, 1000)
    b.host("aten::mm", 0, 100, args=MM_ARGS)
    b.kernel(20, 520, launch_us=10, name="k1")
    b.host("cudaDeviceSynchronize", 200, 525, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::relu", 900, 950)
    b.kernel(905, 990, launch_us=910, name="k2")
    path = tmp_path / "sync.json"
    write_chrome_trace(b.b.build(), path)
    code, out, _ = run(["analyze", "--json", str(path)], capsys)
    (finding,) = [f for f in json.loads(out)["traces"][0]["findings"] if "sync" in f["title"]]
    assert finding["title"] == "host sync cudaDeviceSynchronize (1 call)"
    assert finding["host_op"] == "cudaDeviceSynchronize"  # the JSON keeps it whole

    from rich.console import Console

    from neuron_profiler.analysis import analyze
    from neuron_profiler.reports.terminal import render_terminal
    from neuron_profiler.trace import load_trace

    console = Console(width=400, record=True)
    render_terminal([analyze(load_trace(path))], console=console, top=5)
    text = console.export_text()
    assert "host sync cudaDeviceSynchronize (1 call) " in text
    assert "(cudaDeviceSynchronize)" not in text
