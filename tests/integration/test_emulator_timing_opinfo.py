"""No uninitialised memory reaches the user in timing mode (issue 24, point 2), swept over
every operator in PyTorch's own OpInfo database that takes float32 (~640 run on the emulated
device): with the size thresholds forced to "model everything" and with the defaults, every
out-of-place output is the same in two runs made after the host heap was filled with a
sentinel and freed, and no output holds the sentinel's bits. A skipped output that were left
uninitialised would pick up the freed sentinel (or differ between the runs)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it (in the test extra)

from torch.testing._internal import common_utils  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.opinfo import core as opinfo_core  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator import outputs  # noqa: E402

pytestmark = pytest.mark.torch
SENTINEL32 = 0x7FA5A5A5  # a NaN no operator computes from these inputs
SENTINEL64 = (SENTINEL32 << 32) | SENTINEL32
MIN_OPS = 500  # the database has ~700 operators; far fewer running means the sweep broke


@pytest.fixture(autouse=True)
def _no_unittest_frame_search(monkeypatch):  # noqa: ANN001
    """``sample_inputs`` looks for a calling ``unittest.TestCase`` with ``inspect.stack()``, which
    reads every frame's source and scans ``sys.modules`` per frame: ~0.1 s a call under pytest
    (minutes over the database, most of this file's time). A pytest function has no such frame,
    so the search returns None anyway; answering None at once gives the same samples (same
    seed: ``TrackedInputIter`` seeds with ``SEED`` when no test function is found)."""
    for module in (common_utils, opinfo_core):
        monkeypatch.setattr(module, "extract_test_fn", lambda: None)


@pytest.fixture(autouse=True)
def _timing_mode():
    emu.enable(cores=1, numerics=False)
    yield
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)


def _scramble_heap() -> None:
    """Fill freed heap blocks of many sizes with the sentinel (then free them)."""
    for n in (16, 256, 4096, 1 << 15):  # below the mmap threshold: reused heap blocks
        block = torch.full((n,), SENTINEL32, dtype=torch.int32)
        del block


def _tensors(value: object) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _on_device(x: object) -> object:
    return x.to("neuron") if isinstance(x, torch.Tensor) else x


def _run(op, sample) -> list | None:  # noqa: ANN001
    """The op's device outputs on the host (None: it cannot run here, or writes in place)."""
    try:
        args = tree_map(_on_device, [sample.input, *sample.args])
        kwargs = tree_map(_on_device, sample.kwargs)
        inputs = {id(t) for t in _tensors([args, list(kwargs.values())])}
        torch.manual_seed(0)
        _scramble_heap()
        out = op.op(*args, **kwargs)
    except Exception:  # sparse inputs, ops the emulated device refuses: their own errors
        return None
    outs = [t for t in _tensors(out) if t.device.type == "neuron"]
    if not outs or any(id(t) in inputs for t in outs):
        return None  # host outputs, or written in place: not a skipped output
    # a sparse output (to_sparse) is computed for real: compared as its dense values
    return [t.cpu().to_dense() if t.layout != torch.strided else t.cpu() for t in outs]


def _holds_sentinel(t) -> bool:  # noqa: ANN001
    if t.dtype.itemsize == 4:
        return bool((t.contiguous().view(torch.int32) == SENTINEL32).any())
    if t.dtype.itemsize == 8:
        return bool((t.contiguous().view(torch.int64) == SENTINEL64).any())
    return False


def _same(a, b) -> bool:  # noqa: ANN001
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_complex:
        a, b = torch.view_as_real(a.to(torch.complex64)), torch.view_as_real(b.to(torch.complex64))
    if a.dtype.is_floating_point:  # NaN == NaN here: same bits in both runs is what counts
        a, b = a.to(torch.float64), b.to(torch.float64)
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return torch.equal(a, b)


@pytest.mark.parametrize("model_everything", [True, False], ids=["all-modelled", "hybrid"])
def test_every_opinfo_output_is_defined(monkeypatch, model_everything: bool) -> None:  # noqa: ANN001
    if model_everything:
        for limit in ("REAL_MAX_ELEMENTS", "REAL_MAX_INDEX_ELEMENTS", "REAL_MAX_FLOPS"):
            monkeypatch.setattr(outputs, limit, -1)
    ran, bad = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
            try:
                sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
            except Exception:
                continue
            first = _run(op, sample)
            if first is None:
                continue
            second = _run(op, sample)
            ran += 1
            if second is None or len(first) != len(second):
                bad.append((op.name, "ran once"))
                continue
            for a, b in zip(first, second, strict=True):
                if _holds_sentinel(a) or _holds_sentinel(b):
                    bad.append((op.name, "freed heap bytes in the output"))
                elif not _same(a, b):
                    bad.append((op.name, "differs between runs"))
    assert ran >= MIN_OPS, ran
    assert bad == [], bad
