"""Module conversion on the emulated device behaves as on a real one: tied weights stay tied
through ``.to("neuron")`` and ``.cpu()``, an optimizer made before ``.to()`` updates the device
parameters, ``state_dict`` keys are unchanged, and a held view makes ``.to()`` raise torch's
documented swap error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1)
    yield
    emu.enable(cores=2)


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.mid = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT-2's lm_head / wte

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(self.emb(x))))


def _train(model: Tied, opt: torch.optim.Optimizer, device: str, steps: int = 4) -> list[float]:
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randint(0, 32, (8, 5), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(x.to(device)).reshape(-1, 32), x.reshape(-1).to(device)
        )
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_tied_weights_train_on_neuron_equal_to_cpu() -> None:
    torch.manual_seed(0)
    cpu = Tied()
    dev = Tied()
    dev.load_state_dict(cpu.state_dict())
    keys = list(dev.state_dict())
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=1e-2)  # made before .to(), as on CUDA
    dev.to("neuron")
    assert dev.head.weight is dev.emb.weight and dev.emb.weight.device.type == "neuron"
    assert len(list(dev.parameters())) == len(list(cpu.parameters())) == 3  # tied: once
    assert list(dev.state_dict()) == keys
    assert all(p.device.type == "neuron" for p in opt_dev.param_groups[0]["params"])
    want = _train(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2), "cpu")
    got = _train(dev, opt_dev, "neuron")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), msg=name)
    dev.cpu()
    assert dev.head.weight is dev.emb.weight and dev.emb.weight.device.type == "cpu"
    assert list(dev.state_dict()) == keys


def test_to_with_a_held_view_of_a_parameter_raises_torchs_swap_error() -> None:
    model = torch.nn.Linear(4, 4)
    row = model.weight[0]  # a view keeps a second reference to the parameter's tensor
    with pytest.raises(RuntimeError, match="Couldn't swap Linear.weight"):
        model.to("neuron")
    del row
    model.to("neuron")
    assert model.weight.device.type == "neuron"
