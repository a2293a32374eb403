"""What a command's input lost is reported, one line per warning and nothing after it: mistyped
events skipped (``Trace.skipped_events``), a truncated file, malformed device events."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from neuron_profiler import output as _output
from neuron_profiler.cli.main import main
from neuron_profiler.exporters import chrome
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.trace import loader

HOST_PID, TID = 4321, 777


def host_text(n: int = 20, mistyped: int = 0) -> str:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": HOST_PID,
            "tid": TID,
            "ts": 1000 + i * 10,
            "dur": 5,
        }
        for i in range(n)
    ]
    for i in range(mistyped):  # a different mistyped field each time
        events[2 + i][("ts", "dur", "name", "pid")[i % 4]] = {"oops": [i]}
    return json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events})


def device_text(malformed: int = 0) -> str:
    t = 10**18 + 1_000_000 + 20_000
    events = [
        {
            "event_type": F.NC_EXEC_RUNNING,
            "phase": phase,
            "tracking_id": 1,
            "nc_idx": 0,
            "thread_id": TID,
            "timestamp_ns": ts,
            "data": {},
        }
        for phase, ts in (("start", t), ("stop", t + 3_000))
    ]
    events += [
        {
            "event_type": F.NC_EXEC_RUNNING,
            "phase": "start",
            "tracking_id": 9,
            "nc_idx": "zero",
            "thread_id": TID,
            "timestamp_ns": "soon",
            "data": {},
        }
        for _ in range(malformed)
    ]
    return json.dumps({"events": events})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err.splitlines()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("out", ["o.json", "o.json.gz", "o.pftrace"])
def test_export_reports_mistyped_events(capsys: pytest.CaptureFixture[str], out: str) -> None:
    Path("in.json").write_text(host_text(mistyped=3))
    code, stdout, err = run(capsys, "export", "in.json", "-o", out)
    assert code == 0 and stdout.startswith("wrote ")
    assert err == ["neuron-prof: warning: in.json: 3 events skipped (mistyped fields)"]


def test_one_mistyped_event_is_singular(capsys: pytest.CaptureFixture[str]) -> None:
    Path("in.json").write_text(host_text(mistyped=1))
    assert run(capsys, "export", "in.json", "-o", "o.json")[2] == [
        "neuron-prof: warning: in.json: 1 event skipped (mistyped fields)"
    ]


def test_clean_input_warns_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    Path("in.json").write_text(host_text())
    Path("d.json").write_text(device_text())
    assert run(capsys, "export", "in.json", "-o", "o.json")[::2] == (0, [])
    assert run(capsys, "merge", "in.json", "d.json", "-o", "m.json")[::2] == (0, [])


def test_truncated_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    text = host_text(mistyped=2)
    Path("cut.json").write_text(text[:-60])
    code, _, err = run(capsys, "export", "cut.json", "-o", "o.json")
    assert code == 0
    assert err[0].startswith("neuron-prof: warning: cut.json: file is truncated; kept ")
    assert err[1:] == ["neuron-prof: warning: cut.json: 2 events skipped (mistyped fields)"]


def test_truncated_is_reported_even_when_the_loader_says_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader.warnings, "warn", lambda *a, **k: None)
    Path("cut.json").write_text(host_text()[:-60])
    code, _, err = run(capsys, "export", "cut.json", "-o", "o.json")
    assert code == 0 and err == [
        "neuron-prof: warning: cut.json: file is truncated; only "
        "complete events before the cut were kept"
    ]


def test_merge_reports_host_and_device_losses(capsys: pytest.CaptureFixture[str]) -> None:
    Path("h.json").write_text(host_text(mistyped=4)[:-60])
    Path("d.json").write_text(device_text(malformed=2))
    code, stdout, err = run(capsys, "merge", "h.json", "d.json", "-o", "m.pftrace")
    assert code == 0 and "merged 1 device activities" in stdout
    assert len(err) == 3 and "h.json: file is truncated" in err[0]
    assert err[1:] == [
        "neuron-prof: warning: h.json: 4 events skipped (mistyped fields)",
        "neuron-prof: warning: d.json: 2 device events malformed (mistyped, "
        "missing or out-of-range fields: skipped, or kept without the bad field)",
    ]


def test_warnings_then_a_write_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before loading: the error alone. Failing while writing: the input's warning,
    then the error, one line each."""
    Path("in.json").write_text(host_text(mistyped=1))
    code, _, err = run(capsys, "export", "in.json", "-o", "missing/o.json")
    assert code == 2 and err == ["neuron-prof: error: missing/o.json: no such directory: missing"]

    def full(fd: int, mode: str) -> object:
        os.close(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_output, "open", full, raising=False)
    code, _, err = run(capsys, "export", "in.json", "-o", "o.json")
    assert code == 2 and err == [
        "neuron-prof: warning: in.json: 1 event skipped (mistyped fields)",
        "neuron-prof: error: o.json: no space left on device (disk full)",
    ]
    assert os.listdir() == ["in.json"]


def test_any_python_warning_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warning raised anywhere on a command's path, not only while loading."""
    original = chrome.write_chrome_trace

    def noisy(*args: object, **kwargs: object) -> object:
        warnings.warn("first line\n  second line", UserWarning, stacklevel=1)
        return original(*args, **kwargs)

    monkeypatch.setattr(chrome, "write_chrome_trace", noisy)
    Path("in.json").write_text(host_text())
    code, _, err = run(capsys, "export", "in.json", "-o", "o.json")
    assert code == 0 and err == ["neuron-prof: warning: first line second line"]
    assert warnings.showwarning is not None and warnings.showwarning.__module__ == "warnings"


def test_as_a_process_no_source_line_follows(tmp_path: Path) -> None:
    """The real entry point with Python's default warning filters and stderr."""
    Path("cut.json").write_text(host_text(mistyped=1)[:-60])
    res = subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", "export", "cut.json", "-o", "o.json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 2 and all(x.startswith("neuron-prof: warning: cut.json: ") for x in lines)
