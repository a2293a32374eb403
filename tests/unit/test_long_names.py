"""Issue 23, 13: a 50 MB op name. No renderer shows an unbounded string: the terminal and HTML
reports shorten every name from the trace (``reports.text.shorten``) so their output stays
small, while ``--json`` keeps the name whole. (Bounded output size is asserted, not wall time:
before the shortening the terminal report took over 10 minutes on such a name.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from html_checks import _copy, _fallback, parse
from trace_factory import Build

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.html_report import plotly_js
from neuron_profiler.reports.text import ELLIPSIS, NAME_LIMIT, shorten

MB = 1_000_000
OP = "aten::" + "op_" * (50 * MB // 3)  # a 50 MB op name, covering an idle gap
KERNEL = "TensorE: " + "k" * MB  # 1 MB each: a kernel, a device, a fallback op
DEVICE = "NeuronCore " + "d" * MB
FALLBACK = "aten::" + "f" * MB
BOUND = 200_000  # characters of terminal output or of HTML besides plotly.js: far under 1 MB


def test_the_shortening_rule() -> None:
    """``limit`` characters, the head (one more when odd) and tail kept around one ellipsis."""
    name = "aten::" + "x" * 1000 + "::end"
    short = shorten(name)
    assert len(short) == NAME_LIMIT and short.count(ELLIPSIS) == 1
    assert short[:100] == name[:100] and short[101:] == name[-99:]
    assert shorten("aten::add") == "aten::add" and shorten("abcdef", 3) == "a…f"
    assert shorten("abcdef", 4) == "ab…f" and shorten("abcdef", 1) == "…"
    with pytest.raises(ValueError):
        shorten("abc", 0)


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 1 ms step on a core named DEVICE: kernel KERNEL 0-100 µs, then the host in OP
    100-400 (the next kernel launched late: a host_bound_launch gap), a CPU fallback FALLBACK
    500-800 with its copies, kernel 800-1000."""
    b = Build().step(1, 0, 1000)
    b.b.process_names[0] = DEVICE
    b.kernel(0, 100, launch_us=0, name=KERNEL)
    b.host(OP, 100, 400)
    b.kernel(400, 500, launch_us=395)
    _fallback(b, FALLBACK, 500, 800, 7)
    _copy(b, 500, 510, "d2h", 7)
    _copy(b, 790, 800, "h2d", 7)
    b.kernel(800, 1000, launch_us=790, name=KERNEL)
    path = tmp_path_factory.mktemp("huge") / "huge.json"
    write_chrome_trace(b.b.build(), path)
    assert path.stat().st_size > 50 * MB
    return path


def test_terminal_report_is_bounded(huge: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(huge)]) == 0
    out = capsys.readouterr().out
    assert len(out) < BOUND, len(out)
    assert "Operators" in out and "Kernels" in out and "What to fix first" in out
    assert out.count(ELLIPSIS) >= 4  # the op, the kernel, the device, the fallback


def test_json_keeps_the_name_and_html_is_bounded(
    huge: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "r.html"
    assert main(["analyze", str(huge), "--json", "--html", str(page)]) == 0
    doc = json.loads(capsys.readouterr().out)["traces"][0]
    assert OP in [o["name"] for o in doc["ops"]]  # whole in --json
    assert KERNEL in [k["name"] for k in doc["kernels"]]
    assert [d["label"] for d in doc["idle"]["devices"]] == [DEVICE]
    assert [f["op"] for f in doc["fallbacks"]] == [FALLBACK]
    text = page.read_text()
    assert len(text) - len(plotly_js()) < BOUND, len(text) - len(plotly_js())
    parsed = parse(text)
    shown = " ".join(parsed.text)
    assert shorten(FALLBACK) in shown and shorten(DEVICE) in shown
    figures = json.dumps(parsed.figures(), ensure_ascii=False)
    assert shorten(DEVICE) in figures and DEVICE not in figures
