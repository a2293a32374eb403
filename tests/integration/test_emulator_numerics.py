"""Unchanged GPU-style training code on device("neuron") gives the results of the same code on
CPU: an MLP and a small conv net with AdamW (multi-tensor path on the device), a transformer
block, a second core, and bf16 autocast under CPU autocast's op policy."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402

pytestmark = pytest.mark.torch
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)


def _train(model, device, x, y, loss_fn, steps=4, opt_factory=None):
    model = copy.deepcopy(model).to(device)
    opt = (opt_factory or (lambda p: torch.optim.AdamW(p, lr=1e-2)))(model.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], model


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 32),
        torch.nn.GELU(),
        torch.nn.Linear(32, 4),
    )


def test_mlp_adamw_equals_cpu_on_both_cores() -> None:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 16, generator=g), torch.randn(12, 4, generator=g)
    ref_losses, ref_params, _ = _train(_mlp(), "cpu", x, y, F.mse_loss)
    for device in ("neuron", "neuron:1"):
        losses, params, model = _train(_mlp(), device, x, y, F.mse_loss)
        assert next(model.parameters()).device == torch.device(
            device if ":" in device else "neuron:0"
        )
        assert losses == pytest.approx(ref_losses, rel=1e-6)
        for p, q in zip(params, ref_params, strict=True):
            torch.testing.assert_close(p, q)


def test_conv_net_adamw_equals_cpu() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 10),
    )
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(6, 3, 8, 8, generator=g), torch.randint(0, 10, (6,), generator=g)
    ref_losses, ref_params, ref_model = _train(net, "cpu", x, y, F.cross_entropy)
    losses, params, model = _train(net, "neuron", x, y, F.cross_entropy)
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    for p, q in zip(params, ref_params, strict=True):
        torch.testing.assert_close(p, q)
    torch.testing.assert_close(model[1].running_mean.cpu(), ref_model[1].running_mean)


def test_transformer_block_trains_like_cpu() -> None:
    # SDPA takes PyTorch's math path on a Python-registered device (the fused-kernel choice
    # cannot be hooked from Python), so results match CPU to float32 rounding, not bitwise; SGD
    # keeps that rounding from being amplified the way Adam does for zero-gradient biases.
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(3, 6, 32, generator=g), torch.randn(3, 6, 32, generator=g)
    sgd = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa: E731
    ref_losses, ref_params, ref_model = _train(block, "cpu", x, y, F.mse_loss, opt_factory=sgd)
    losses, params, model = _train(block, "neuron", x, y, F.mse_loss, opt_factory=sgd)
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    assert losses[-1] < losses[0]
    for p, q in zip(params, ref_params, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    model.eval()
    ref_model.eval()
    with torch.no_grad():  # inference fast path (fused encoder kernel) as well
        torch.testing.assert_close(model(x.to("neuron")).cpu(), ref_model(x))


def test_bf16_autocast_equals_cpu_autocast() -> None:
    model = _mlp()
    x, y = torch.randn(12, 16), torch.randn(12, 4)
    results = {}
    for device in ("cpu", "neuron"):
        m = copy.deepcopy(model).to(device)
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            out = m(x.to(device))
            loss = F.mse_loss(out, y.to(device))  # float32 under CPU's policy
        loss.backward()
        results[device] = (
            out.dtype,
            loss.dtype,
            out.detach().cpu(),
            loss.item(),
            [p.grad.cpu() for p in m.parameters()],
        )
    (od, ld, out_n, loss_n, grads_n), (od_c, ld_c, out_c, loss_c, grads_c) = (
        results["neuron"],
        results["cpu"],
    )
    assert (od, ld) == (od_c, ld_c) == (torch.bfloat16, torch.float32)
    assert torch.equal(out_n, out_c) and loss_n == loss_c
    for a, b in zip(grads_n, grads_c, strict=True):
        torch.testing.assert_close(a, b)
    with torch.autocast("neuron"):  # no dtype given: bfloat16 on NeuronCores
        assert (x.to("neuron") @ x.t().to("neuron")).dtype == torch.bfloat16
