"""The terminal report as a reader sees it (issue 23): positions as "step N +x ms", not the
trace's absolute µs; as wide as the terminal (120 columns when piped); the advice wraps less;
names break at sensible places, never inside a word that fits; idle in the step table and in
the cause table say what each counts when the emulator's own work is in the trace."""

from __future__ import annotations

import io
import os
import pty
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from trace_factory import Build

from neuron_profiler.analysis.causes import cause
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.terminal import render_terminal
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

T = 5_552_829_762  # µs: where a real capture's steps lie on the host clock
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def render(report, width: int = 120) -> str:  # noqa: ANN001
    console = Console(file=io.StringIO(), width=width)
    render_terminal([report], console=console)
    return console.file.getvalue()


def table(text: str, title: str, key: int) -> list[list[list[str]]]:
    """The body of the table whose title starts with ``title``: rows of cells, each cell its
    lines (right-stripped); a row starts where column ``key`` is not blank."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = at + next(i for i, line in enumerate(lines[at:]) if line.startswith("┡")) + 1
    rows: list[list[list[str]]] = []
    for line in lines[body:]:
        if not line.startswith("│"):
            break
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[key]:
            rows.append([[] for _ in cells])
        for out, c in zip(rows[-1], cells, strict=True):
            if c:
                out.append(c)
    return rows


def sync_trace() -> Build:
    """Steps at T (2 x 1 ms); the device idles from step 2 +0.27 ms to +0.7 ms while the host
    is in .item() (a host_sync gap of 430 µs)."""
    b = Build().step(1, T, T + 1000).step(2, T + 1000, T + 2000)
    b.kernel(T, T + 1270, launch_us=T)
    b.host("aten::item", T + 1200, T + 1300)
    b.host("cudaStreamSynchronize", T + 1210, T + 1290, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::_local_scalar_dense", T + 1210, T + 1290)
    b.kernel(T + 1700, T + 2000, launch_us=T + 5)
    return b


def test_positions_are_steps_and_offsets_not_absolute_us() -> None:
    report = sync_trace().report()
    text = render(report)
    (finding,) = table(text, "What to fix first", key=0)
    assert finding[4] == ["step 2 +0.3 ms"]  # 1270 µs after step 1's start: 270 µs into step 2
    (gap,) = table(text, "Longest idle gaps", key=0)
    assert gap[1] == ["step 2 +0.3 ms"] and gap[3] == ["host_sync"]
    assert f"{T:,}"[:9] not in text and str(T)[:6] not in text  # no absolute µs anywhere


def test_the_findings_table_fills_the_width_and_the_advice_wraps_little() -> None:
    """At 120 columns the findings table fills the width, split so that the table is as short
    as it can be: the host-sync advice (136 characters) fits in 3 lines of at least 40
    columns (at 100 columns, the layout before this change gave it 6 lines of 28)."""
    text = render(sync_trace().report(), width=120)
    (finding,) = table(text, "What to fix first", key=0)
    advice = finding[5]
    assert " ".join(advice) == cause("host_sync").advice
    assert len(advice) <= 3 and max(map(len, advice)) >= 40
    assert max(len(line) for line in text.splitlines()) <= 120
    assert len(next(ln for ln in text.splitlines() if ln.startswith("┏━━┳"))) == 120  # full width


NAMES = (
    "aten::_local_scalar_dense",
    "autograd::engine::evaluate_function: ConvolutionBackward0",
    "aten::native_batch_norm_backward",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
)


def test_names_break_at_sensible_places() -> None:
    """A narrow terminal: each op name spans several lines of its column, and no line break
    falls between two letters or digits of a word that fits the column (e.g. "dens|e"), only
    after "::", a space, a comma or between the parts of a snake_case name."""
    b = Build().step(1, 0, 1000)
    for i, name in enumerate(NAMES):
        b.host(name, 10 + 100 * i, 60 + 100 * i)
    text = render(b.report(), width=64)
    rows = table(text, "Operators", key=1)
    assert sorted("".join(r[0]).replace(" ", "") for r in rows) == sorted(
        n.replace(" ", "") for n in NAMES
    )
    assert all(len(r[0]) > 1 for r in rows)  # narrow enough that every name wraps
    column = max(len(line) for r in rows for line in r[0])
    for r in rows:
        name = next(n for n in NAMES if n.replace(" ", "") == "".join(r[0]).replace(" ", ""))
        at = 0  # where each line ends in the name (a space at a break is not shown)
        for line in r[0][:-1]:
            at = name.index(line, at) + len(line)
            word = (
                re.search(r"[A-Za-z0-9]*$", name[:at])[0] + re.match(r"[A-Za-z0-9]*", name[at:])[0]
            )
            if name[at - 1].isalnum() and name[at].isalnum():  # inside a word: only a long one
                assert len(word) > column, (name, line)


def emulated_trace() -> Build:
    """One 1 ms step: compute 0-100 and 900-1000 µs, the emulator's own host work 110-890
    (780 µs: not idle time) and 20 µs of real idle time around it."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    b.host(V.OVERHEAD_PREFIX + "numerics", 110, 890, kind=EventKind.OTHER, cat=V.CAT_OVERHEAD)
    b.kernel(900, 1000, launch_us=0)
    return b


def test_step_and_cause_tables_say_what_idle_counts() -> None:
    """wall - busy = 0.8 ms: 0.78 ms of it the emulator's work, 0.02 ms idle. The step table
    shows wall - busy as "not busy" with the emulator's part apart; the cause table shows
    idle without it, and the two percentages add up to the step table's."""
    report = emulated_trace().report()
    text = render(report, width=140)
    (step,) = table(text, "Step breakdown", key=0)
    header = next(ln for ln in text.splitlines() if ln.startswith("┃step"))
    assert [c.strip() for c in header.strip("┃").split("┃")][-3:] == [
        "not busy",
        "not busy %",
        "emu.",
    ]
    assert [c[0] for c in step[-3:]] == ["0.800", "80.0", "0.780"]
    assert "not busy = wall − busy: idle time plus the emulator's own host work" in text
    rows = {r[0][0]: r for r in table(text, "Device idle time by cause", key=0)}
    assert rows["idle"][1] == ["0.020 (2.0%)"]
    assert rows["emulator overhead"][1] == ["0.780 (78.0%)"]
    assert "idle: without the emulator overhead" in text
    # no emulator work: no emu. column, not busy is the cause table's idle
    plain = render(sync_trace().report(), width=140)
    header = next(ln for ln in plain.splitlines() if ln.startswith("┃step"))
    assert [c.strip() for c in header.strip("┃").split("┃")][-2:] == ["not busy", "not busy %"]
    assert "not busy = wall − busy: the idle time of the idle-by-cause table" in plain


# --- the width: the terminal's own (COLUMNS there), or PIPED_WIDTH when piped ---------------


@pytest.fixture(scope="module")
def wide_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace whose report has lines as long as any width (the rules) and a findings table."""
    path = tmp_path_factory.mktemp("width") / "t.json"
    write_chrome_trace(sync_trace().b.build(), path)
    return path


def _cli(path: Path, env: dict[str, str], pty_columns: int | None = None) -> str:
    code = "from neuron_profiler.cli.main import main; raise SystemExit(main(['analyze', %r]))"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | env
    env |= {"TERM": "xterm", "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", code % str(path)]
    if pty_columns is None:
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout
    import fcntl
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, pty_columns, 0, 0))
    proc = subprocess.Popen(args, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_piped_output_is_piped_width(wide_trace: Path) -> None:
    from neuron_profiler.reports.terminal import PIPED_WIDTH

    out = _cli(wide_trace, {})
    assert PIPED_WIDTH == 120 and _widest(out) == 120
    assert out.splitlines()[0] == "=" * 120


def test_piped_output_ignores_columns(wide_trace: Path) -> None:
    """A parent that loaded GNU readline exports COLUMNS=80 (pytest does): not a pipe's width."""
    assert _widest(_cli(wide_trace, {"COLUMNS": "80"})) == 120


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminal on this platform")
def test_a_terminal_gets_its_own_width(wide_trace: Path) -> None:
    out = _cli(wide_trace, {}, pty_columns=170)
    assert _widest(out) == 170
    rule = next(line for line in out.splitlines() if line.startswith("="))
    assert rule == "=" * 170
    assert "step 2 +0.3 ms" in out
    # in a terminal, COLUMNS is its width (as for any rich program)
    assert _widest(_cli(wide_trace, {"COLUMNS": "150"}, pty_columns=170)) == 150
