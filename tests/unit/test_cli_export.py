"""``neuron-prof export``: converts, and bad input exits 2 with one line and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from neuron_profiler.trace import load_trace


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", *args], capture_output=True, text=True
    )


def test_export_writes_reloadable_trace(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": i * 10, "dur": 5}
        for i in range(20)
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}))
    result = _run("export", str(src), "-o", str(tmp_path / "out.json.gz"))
    assert result.returncode == 0, result.stderr
    assert len(load_trace(tmp_path / "out.json.gz")) == 20


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    src = tmp_path / "broken.json"
    src.write_text("{nope")
    result = _run("export", str(src), "-o", str(tmp_path / "out.json"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(src) in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()


def _source(tmp_path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5}
        for i in range(3)
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"traceEvents": events}))
    return src


def test_suffix_in_any_case_picks_its_format(tmp_path: Path) -> None:
    """``-o X.JSON.GZ`` was refused as an unknown format; it is gzip-compressed Chrome JSON."""
    src = _source(tmp_path)
    out = tmp_path / "OUT.JSON.GZ"
    result = _run("export", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:2] == b"\x1f\x8b" and len(load_trace(out)) == 3


def test_no_args_with_a_json_output_is_refused(tmp_path: Path) -> None:
    """``--no-args`` is .pftrace only: with a Chrome JSON output it was silently ignored."""
    src = _source(tmp_path)
    result = _run("export", str(src), "-o", str(tmp_path / "out.json"), "--no-args")
    assert result.returncode == 2 and "--no-args" in result.stderr and ".pftrace" in result.stderr
    assert not (tmp_path / "out.json").exists()
    ok = _run("export", str(src), "-o", str(tmp_path / "out.pftrace"), "--no-args")
    assert ok.returncode == 0, ok.stderr
