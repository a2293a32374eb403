"""Python call sites of host ops: from python_function rows (current torch, with_stack=True) and
from the "Call stack" arg of older traces; the innermost user frame wins."""

from __future__ import annotations

import pytest
from trace_factory import US, Build

from neuron_profiler.analysis.callsites import call_sites, user_frame
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V


@pytest.mark.parametrize(
    ("frame", "site"),
    [
        ("train.py(42): step", "train.py:42 step"),
        ("/home/me/proj/model.py(7): forward", "/home/me/proj/model.py:7 forward"),
        ("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1501): _call_impl", ""),
        ("/src/pytorch/torch/profiler/profiler.py(312): step", ""),
        ("/usr/lib/python3.10/threading.py(975): run", ""),
        ("/opt/venv/lib/python3.11/dist-packages/numpy/core/fromnumeric.py(59): _wrapfunc", ""),
        ("/work/neuron_profiler/emulator/dispatch.py(253): execute", ""),
        ("<built-in method bincount of type object at 0x7f00>", ""),
        ("nn.Module: Linear_0", ""),
    ],
)
def test_user_frames(frame: str, site: str) -> None:
    assert user_frame(frame) == site


def test_python_rows_innermost_user_frame() -> None:
    """<module> -> train_step (user) -> torch frame -> built-in: the op inside gets
    train_step, not the torch frame nor <module>."""
    b = Build().step(1, 0, 1000)
    for name, lo, hi in (
        ("run.py(1): <module>", 0, 1000),
        ("run.py(20): train_step", 100, 900),
        ("site-packages/torch/_tensor.py(40): __torch_dispatch__", 200, 800),
        ("<built-in method nonzero of type object at 0x1>", 210, 790),
    ):
        b.host(name, lo, hi, kind=EventKind.PYTHON, cat="python_function")
    b.host("aten::nonzero", 300, 700)
    b.host("aten::add", 950, 990)
    t = b.b.build()
    rows = [i for i in range(len(t)) if t.name(i) in ("aten::nonzero", "aten::add")]
    assert call_sites(t, sorted(rows, key=t.name)) == ["run.py:1 <module>", "run.py:20 train_step"]


def test_call_stack_arg_of_the_op_or_the_op_around_it() -> None:
    """Older traces: frames innermost first on cpu_op rows; a runtime sync gets its op's."""
    stack = (
        "/venv/lib/python3.8/site-packages/torch/tensor.py(20): item;"
        "loop.py(12): log_loss;loop.py(40): <module>"
    )
    b = Build().step(1, 0, 1000)
    b.host("aten::item", 100, 400, args={V.ARG_CALL_STACK: stack})
    b.host("cudaStreamSynchronize", 150, 390, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::mm", 500, 600, args={V.ARG_CALL_STACK: ""})
    t = b.b.build()
    by_name = {t.name(i): i for i in range(len(t))}
    assert call_sites(
        t, [by_name["cudaStreamSynchronize"], by_name["aten::item"], by_name["aten::mm"]]
    ) == ["loop.py:12 log_loss", "loop.py:12 log_loss", ""]


def test_sync_finding_carries_the_call_site() -> None:
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    b.host("aten::item", 50, 130, args={V.ARG_CALL_STACK: "loop.py(12): log_loss"})
    b.host("cudaStreamSynchronize", 60, 120, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.kernel(300, 1000, launch_us=290)  # gap 100-300 begins inside aten::item
    r = b.report()
    (sync,) = r.findings.syncs
    assert sync.call_site == "loop.py:12 log_loss" and sync.idle_ns == 200 * US
    (finding,) = [f for f in r.findings.findings if f.kind == "host_sync:aten::item"]
    assert finding.call_site == sync.call_site
