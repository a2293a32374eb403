"""Every case of the generated hostile-input corpus (``tests/hostile_corpus.py``) through every
command that takes it: no traceback, one line per warning, the input untouched, and the events,
counts and times the case's writer put in the file."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest
from hostile_corpus import CASES, FLOW, Case, Command, commands_for, output_names, output_ts_us

from neuron_profiler.cli.main import main
from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S

RUNS = [
    pytest.param(
        case,
        command,
        id=f"{case.name}-{command.name}",
        marks=[pytest.mark.xfail(reason=case.known_failure, strict=True)]
        if case.known_failure
        else [],
    )
    for case in CASES
    for command in commands_for(case)
]


@pytest.mark.parametrize("case, command", RUNS)
def test_every_command_on_every_case(
    case: Case, command: Command, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = case.write(tmp_path)
    before = path.read_bytes()
    argv, out = command.argv(path, tmp_path)
    code = main(argv)
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert "Traceback" not in err
    assert all(
        line.startswith(("neuron-prof: warning: ", "neuron-prof: error: ")) for line in lines
    ), err
    assert path.read_bytes() == before
    expected = case.expected
    assert code == expected.exit_code, err
    if code:
        assert len(lines) == 1 and expected.error in lines[0] and not out.exists()
        return
    left = [line for line in lines if line.startswith("neuron-prof: warning: ")]
    for wanted in expected.warnings:  # each in a line of its own
        hit = next((line for line in left if wanted in line), None)
        assert hit is not None, f"no warning line with {wanted!r} in {lines}"
        left.remove(hit)
    got, want = Counter(output_names(out)), Counter(expected.names)
    if out.name.endswith(".pftrace"):
        want.pop(FLOW, None)  # (a flow without its other end is left out of a .pftrace)
    if command.merges:
        assert want <= got and sum(got.values()) > sum(want.values())  # and device rows
    else:
        assert got == want
    if expected.ts_us and out.name.endswith(".json") and not command.merges:
        times = output_ts_us(out)
        assert {k: times[k] for k in expected.ts_us} == pytest.approx(expected.ts_us)


TRACE_CASES = [c for c in CASES if c.role == "trace"]


@pytest.mark.parametrize("case", TRACE_CASES, ids=[c.name for c in TRACE_CASES])
def test_api_result_holds_the_counts(case: Case, tmp_path: Path) -> None:
    """The API says what the command said: ``Trace.load_report``, ``truncated``,
    ``skipped_events``, and the events themselves."""
    path = case.write(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case.expected.exit_code:
            with pytest.raises(TraceLoadError, match=case.expected.error):
                load_trace(path)
            return
        trace = load_trace(path)
    report = trace.load_report
    for field, value in case.expected.report.items():
        got = (
            getattr(trace, field)
            if field in ("truncated", "skipped_events")
            else getattr(report, field)
        )
        assert got == value, field
    assert Counter(trace.name(i) for i in range(len(trace))) == Counter(case.expected.names)
    for row in range(len(trace)):  # every kept event's args decode
        assert isinstance(trace.args(row), dict)
    assert (trace.col(S.PID) != 0).all()


@pytest.mark.parametrize("name", ["gzip_corrupt_mid_stream", "ids_1e400", "latin1_file"])
def test_as_a_process_each_warning_is_one_line(name: str, tmp_path: Path) -> None:
    """The real entry point, Python's default warning filters and stderr: one line per
    warning, no source line after it."""
    import subprocess
    import sys

    case = next(c for c in CASES if c.name == name)
    path = case.write(tmp_path)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuron_profiler.cli.main",
            "export",
            str(path),
            "-o",
            str(tmp_path / "o.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines and all(line.startswith(f"neuron-prof: warning: {path}: ") for line in lines)
    assert len(lines) == len(case.expected.warnings)


@pytest.mark.parametrize("case", TRACE_CASES, ids=lambda c: c.name)
def test_analyze_on_every_case(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``analyze --json`` takes the same hostile files: no traceback, the case's exit status,
    one line per warning or error, a report that is JSON, the input untouched."""
    import json

    path = case.write(tmp_path)
    before = path.read_bytes()
    code = main(["analyze", "--json", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and path.read_bytes() == before
    assert all(
        line.startswith(("neuron-prof: warning: ", "neuron-prof: error: "))
        for line in err.splitlines()
    ), err
    assert code == case.expected.exit_code, err
    if code == 0:
        json.loads(out)
    for wanted in case.expected.warnings:
        assert any(wanted in line for line in err.splitlines()), (wanted, err)


@pytest.mark.parametrize(
    "argv",
    [["analyze"], ["project", "--chip", "trn2"], ["diff"]],
    ids=["analyze", "project", "diff"],
)
@pytest.mark.parametrize("case", TRACE_CASES, ids=lambda c: c.name)
def test_terminal_reports_on_every_case(
    case: Case, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The terminal reports of ``analyze``, ``project`` and ``diff`` (a trace against itself)
    on the same hostile files: no traceback, the case's exit status, one line per warning or
    error, and names printed as written: neither rich markup nor terminal control sequences in
    them take effect."""
    path = case.write(tmp_path)
    before = path.read_bytes()
    code = main([*argv, str(path)] + ([str(path)] if argv == ["diff"] else []))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and path.read_bytes() == before
    lines = err.splitlines()
    assert all(
        line.startswith(("neuron-prof: warning: ", "neuron-prof: error: ")) for line in lines
    ), err
    assert code == case.expected.exit_code, err
    if code:
        assert len(lines) == 1 and case.expected.error in lines[0]
    assert "\x1b" not in out and "\x07" not in out


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "IN", "-o", "OUT.json"],
        ["analyze", "IN"],
        ["project", "IN", "--chip", "trn2"],
        ["diff", "IN", "IN"],
        ["merge", "IN", "IN", "-o", "OUT.json"],
    ],
    ids=lambda a: a[0],
)
def test_a_pipe_is_refused_before_it_is_opened(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO with no writer (or ``<(cat trace.json)``, /dev/zero): readers seek and read
    twice, and opening a FIFO blocks until a writer comes, so it is one error line, at once."""
    import os

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    code = main(
        [str(fifo) if a == "IN" else str(tmp_path / a) if a == "OUT.json" else a for a in argv]
    )
    _, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines() == [
        f"neuron-prof: error: {fifo}: not a regular file (a pipe or a device): save it to a file"
    ]
