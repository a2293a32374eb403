"""Recurrent layers, packed sequences and TransformerEncoder's nested-tensor fast path on the
emulated device: results equal CPU's (numerics mode), timing mode runs them with CPU's shapes.

ATen picks CUDA-only fused cell kernels for PrivateUse1 (host_ops.py computes them), packed
sequences keep ``batch_sizes`` on the host (dispatch.host_outputs), and the encoder's nested
intermediates are held on the host (NeuronTensor.holding_nested)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.errors import EmulatorError  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

pytestmark = pytest.mark.torch
nn = torch.nn
R = torch.nn.utils.rnn


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1)
    yield
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)


_CASES = ["lstm", "lstm_nobias", "gru", "gru_nobias", "lstm_cell", "gru_cell"]


def _module(name: str) -> tuple[Any, torch.Tensor]:
    """A recurrent layer that takes a fused cell on the device, and its input: multi-layer,
    bidirectional, batch-first, without bias, and the cells."""
    torch.manual_seed(0)
    module, shape = {
        "lstm": (lambda: nn.LSTM(4, 3, 2, bidirectional=True, batch_first=True), (3, 5, 4)),
        "lstm_nobias": (lambda: nn.LSTM(4, 3, bias=False), (5, 3, 4)),
        "gru": (lambda: nn.GRU(4, 3, 2, bidirectional=True), (5, 3, 4)),
        "gru_nobias": (lambda: nn.GRU(4, 3, bias=False, batch_first=True), (3, 5, 4)),
        "lstm_cell": (lambda: nn.LSTMCell(4, 3), (3, 4)),
        "gru_cell": (lambda: nn.GRUCell(4, 3), (3, 4)),
    }[name]
    return module(), torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def _leaves(out: Any) -> list[torch.Tensor]:
    """A module's outputs (output, (h, c)) flattened."""
    return torch.utils._pytree.tree_leaves(out)


def _step(module: Any, device: str, x: torch.Tensor) -> dict[str, Any]:
    """One training step's loss, outputs and gradients (parameters and input), on the host."""
    m = copy.deepcopy(module).to(device)
    xd = x.to(device, copy=True).requires_grad_()
    flat = _leaves(m(xd))
    loss = sum((t * (i + 1)).pow(2).sum() for i, t in enumerate(flat))  # every output's grad
    loss.backward()
    return {
        "loss": loss.item(),
        "outputs": [t.detach().cpu() for t in flat],
        "devices": {t.device.type for t in flat},
        "grads": [p.grad.cpu() for p in m.parameters()] + [xd.grad.cpu()],
    }


@pytest.mark.parametrize("name", _CASES)
def test_rnn_training_step_equals_cpu(name: str) -> None:
    module, x = _module(name)
    want, got = _step(module, "cpu", x), _step(module, "neuron", x)
    assert got["devices"] == {"neuron"}
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    for a, b in zip(got["outputs"], want["outputs"], strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(got["grads"], want["grads"], strict=True):
        torch.testing.assert_close(a, b)


def _packed_step(device: str) -> dict[str, Any]:
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 3, num_layers=2, bidirectional=True, batch_first=True).to(device)
    g = torch.Generator().manual_seed(2)
    x, lengths = torch.randn(3, 5, 4, generator=g), torch.tensor([5, 2, 4])
    packed = R.pack_padded_sequence(x.to(device), lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed)
    padded, out_lengths = R.pad_packed_sequence(out, batch_first=True)
    loss = padded.pow(2).sum() + h.sum() + 2 * c.sum()
    loss.backward()
    return {
        "loss": loss.item(),
        "padded": padded.detach().cpu(),
        "lengths": out_lengths,
        "batch_sizes": packed.batch_sizes,
        "devices": (packed.data.device.type, padded.device.type, packed.sorted_indices.device.type),
        "grads": [p.grad.cpu() for p in lstm.parameters()],
    }


def test_packed_sequence_lstm_step_equals_cpu() -> None:
    """``batch_sizes`` (and ``pad_packed_sequence``'s lengths) stay on the host, as ATen makes
    them on CUDA; a packed bidirectional 2-layer LSTM step then equals CPU's."""
    want, got = _packed_step("cpu"), _packed_step("neuron")
    assert got["batch_sizes"].device.type == "cpu"
    assert got["lengths"].device.type == "cpu"
    assert got["devices"] == ("neuron", "neuron", "neuron")
    assert torch.equal(got["batch_sizes"], want["batch_sizes"])
    assert torch.equal(got["lengths"], want["lengths"])
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    torch.testing.assert_close(got["padded"], want["padded"])
    for a, b in zip(got["grads"], want["grads"], strict=True):
        torch.testing.assert_close(a, b)
    seqs = [torch.randn(3, 4, device="neuron"), torch.randn(2, 4, device="neuron")]
    packed = R.pack_sequence(seqs)
    assert packed.batch_sizes.device.type == "cpu" and packed.data.device.type == "neuron"
    assert packed.batch_sizes.tolist() == [2, 2, 1]


@pytest.mark.parametrize("size", ["small", "large"])
def test_timing_mode_runs_rnns_with_cpu_shapes(size: str) -> None:
    """Small cells are computed, large ones modelled (outputs.py's rule); both keep CPU's output
    shapes and dtypes, forward and backward, packed too."""
    emu.enable(cores=1, numerics=False)
    h = 3 if size == "small" else 256
    torch.manual_seed(0)
    cases = [
        (nn.LSTM(h, h, num_layers=2, bidirectional=True, batch_first=True), (2, 4, h)),
        (nn.GRU(h, h, num_layers=2), (4, 2, h)),
        (nn.LSTMCell(h, h), (2, h)),
        (nn.GRUCell(h, h), (2, h)),
    ]
    for module, shape in cases:
        x = torch.randn(*shape)
        want, got = module(x), copy.deepcopy(module).to("neuron")(x.to("neuron"))
        flat = _leaves(got)
        for w, o in zip(_leaves(want), flat, strict=True):
            assert (o.shape, o.dtype, o.device.type) == (w.shape, w.dtype, "neuron")
        sum(o.sum() for o in flat).backward()
    lstm = nn.LSTM(h, h).to("neuron")
    packed = R.pack_padded_sequence(torch.randn(4, 3, h, device="neuron"), torch.tensor([4, 3, 1]))
    out, _ = lstm(packed)
    padded, lengths = R.pad_packed_sequence(out)
    assert padded.shape == (4, 3, h) and padded.device.type == "neuron"
    assert lengths.tolist() == [4, 3, 1]
    padded.sum().backward()


def test_profiled_lstm_step_records_the_cells_as_device_kernels(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    torch.manual_seed(0)
    lstm, gru = nn.LSTM(4, 3).to("neuron"), nn.GRUCell(4, 3).to("neuron")
    x = torch.randn(5, 2, 4, device="neuron")

    def step() -> None:
        out, _ = lstm(x)
        (out.sum() + gru(x[0]).sum()).backward()
        torch.neuron.synchronize()

    step()  # warm
    with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == V.CAT_KERNEL]
    by_op: dict[str, list[dict[str, Any]]] = {}
    for e in kernels:
        by_op.setdefault(e["args"].get("op", ""), []).append(e)
    assert len(by_op["aten::_thnn_fused_lstm_cell"]) == 5  # one per time step
    assert len(by_op["aten::_thnn_fused_lstm_cell_backward_impl"]) == 5
    assert len(by_op["aten::_thnn_fused_gru_cell"]) == 1
    assert len(by_op["aten::_thnn_fused_gru_cell_backward"]) == 1
    for op in ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell_backward"):
        for e in by_op[op]:
            assert e["dur"] > 0 and e["args"]["bytes"] > 0 and e["args"]["flops"] > 0


def _encoder(norm: bool) -> Any:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8) if norm else None).eval()


@pytest.mark.parametrize("numerics", [True, False], ids=["numerics", "timing"])
def test_transformer_encoder_padding_mask_fast_path_equals_cpu(numerics: bool) -> None:
    """eval + no_grad + ``src_key_padding_mask`` takes the nested-tensor fast path (the default
    ``enable_nested_tensor=True``): padded positions are zeros, as on CPU."""
    emu.enable(cores=1, numerics=numerics)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 8, generator=g)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    for norm in (False, True):
        enc = _encoder(norm)
        with torch.no_grad():
            want = enc(x, src_key_padding_mask=mask)
            got = copy.deepcopy(enc).to("neuron")(
                x.to("neuron"), src_key_padding_mask=mask.to("neuron")
            )
        assert got.device.type == "neuron" and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
        if not norm:
            assert not got.cpu()[1, 3:].any()  # the nested path's zeros


def test_nested_tensor_on_the_device_raises_one_clear_error() -> None:
    nt = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(3, 3)])
    with pytest.raises(EmulatorError, match="nested tensors are not supported by the emulated"):
        nt.to("neuron")
    made = torch.nested.nested_tensor([torch.randn(2, 3)], device="neuron")
    with pytest.raises(EmulatorError, match="nested tensors are not supported by the emulated"):
        made + 1
