"""Forward-mode autograd on the emulated device equals CPU (as on CUDA).

Autograd's forward formulas make ZeroTensors (``_efficientzerotensor``) for missing tangents; a
device tensor holding the CPU kernel's data-less ZeroTensor crashed the process (``d * 2``) or
raised "data is not allocated yet" (``d @ x``). The cases run in a subprocess, so a crash fails
the test instead of killing pytest.
"""

from __future__ import annotations

import json

import pytest
from fresh_process import run_fresh

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.torch

_CASES = r"""
import json, sys, warnings
import torch
import torch.autograd.forward_ad as fwAD
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.modelled import ModelledValueWarning

emu.enable(cores=1, numerics=sys.argv[1] == "numerics")
n = int(sys.argv[2])
torch.manual_seed(0)
X, T, W = torch.randn(n, n), torch.randn(n, n), torch.randn(n, n)
v = torch.randn(n)


def dual(op, D):
    x, t, w = X.to(D), T.to(D), W.to(D)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        y = {"mul2": lambda: d * 2, "add1": lambda: d + 1, "mulT": lambda: d * w,
             "mm": lambda: d @ w, "rmm": lambda: w @ d, "sin": lambda: d.sin()}[op]()
        p, tan = fwAD.unpack_dual(y)
        return [p.cpu(), tan.cpu()]


def func(op, D):
    x, w = v.to(D), W.to(D)
    if op == "zero":
        z = torch._efficientzerotensor((n, n), device=D)
        return [(z + 1).cpu(), (w @ z).cpu(), (z * 2).cpu()]
    if op == "jvp":
        return list(torch.func.jvp(lambda a: (w @ a).sin() * 2, (x,), (torch.ones_like(x),)))
    if op == "vmapjvp":
        f = lambda tt: torch.func.jvp(lambda a: a * 2, (x,), (tt,))[1]
        return [torch.func.vmap(f)(torch.eye(n).to(D))]
    if op == "jacfwd":
        return [torch.func.jacfwd(lambda a: (w @ a).sin())(x)]
    if op == "hessian":
        return [torch.func.hessian(lambda a: (a ** 3).sum())(x)]


out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", ModelledValueWarning)
    for case in ("mul2", "add1", "mulT", "mm", "rmm", "sin"):
        out["dual " + case] = [dual(case, D) for D in ("cpu", "neuron")]
    for case in ("zero", "jvp", "vmapjvp", "jacfwd", "hessian"):
        out[case] = [[t.cpu() for t in func(case, D)] for D in ("cpu", "neuron")]
report = {}
for case, (cpu, dev) in out.items():
    report[case] = {
        "shapes": [[list(a.shape), list(b.shape)] for a, b in zip(cpu, dev)],
        "strides": [[list(a.stride()), list(b.stride())] for a, b in zip(cpu, dev)],
        "diff": max(float((a - b).abs().max()) for a, b in zip(cpu, dev)),
    }
report["warned"] = sorted({str(w.message).split(";")[1].split(" reads")[0] for w in caught
                           if issubclass(w.category, ModelledValueWarning)})
print("REPORT " + json.dumps(report))
"""


def _run(mode: str, n: int) -> dict:
    proc = run_fresh(_CASES, mode, str(n))
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


def test_forward_mode_autograd_equals_cpu_in_numerics_mode() -> None:
    """make_dual with scalar, tensor and matrix ops, jvp, vmap(jvp), jacfwd, hessian and a bare
    ``_efficientzerotensor``: each tangent and result equals CPU's."""
    report = _run("numerics", 5)
    report.pop("warned")
    for case, r in report.items():
        for cpu_shape, dev_shape in r["shapes"]:
            assert cpu_shape == dev_shape, case
        assert r["diff"] <= 1e-5, (case, r["diff"])


def test_forward_mode_autograd_runs_in_timing_mode() -> None:
    """Timing mode: small cases are computed and equal CPU; large ones (modelled) keep CPU's
    shapes and strides. Asking whether tangents have the same size (``is_same_size``, on every
    forward-mode op) reads shapes only: no warning about reading modelled values names it."""
    small = _run("timing", 5)
    assert small.pop("warned") == []
    for case, r in small.items():
        assert r["diff"] <= 1e-5, (case, r["diff"])
    large = _run("timing", 256)
    assert not any("is_same_size" in w for w in large.pop("warned"))
    for case, r in large.items():
        for cpu_shape, dev_shape in r["shapes"]:
            assert cpu_shape == dev_shape, case
        for cpu_stride, dev_stride in r["strides"]:
            assert cpu_stride == dev_stride, case
