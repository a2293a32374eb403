"""Module conversion on the emulated device behaves as on a real one: tied weights stay tied
through ``.to("neuron")`` and ``.cpu()``, an optimizer made before ``.to()`` updates the device
parameters, ``state_dict`` keys are unchanged, a held view keeps the old memory, a forward
graph left alive does not stop a conversion (as on CUDA), and a backward through it raises."""

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


def test_to_with_a_held_view_of_a_parameter_keeps_the_view_on_the_old_memory() -> None:
    """As on CUDA (``set_data``): the module moves, a view taken before keeps the old memory."""
    model = torch.nn.Linear(4, 4)
    before = model.weight.detach().clone()
    row = model.weight[0]  # a view keeps a second reference to the parameter's tensor
    weight = model.weight
    model.to("neuron")
    assert model.weight is weight and weight.device.type == "neuron"
    assert row.device.type == "cpu" and torch.equal(row.detach(), before[0])
    assert torch.equal(weight.detach().cpu(), before)


def _bn_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))


def test_enable_leaves_torchs_module_conversion_setting_alone() -> None:
    """enable() used to set swap_module_params_on_conversion process-wide, changing how every
    CPU module converts."""
    assert torch.__future__.get_swap_module_params_on_conversion() is False


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_conversion_while_a_forward_graph_is_alive_works_as_on_cuda(device: str) -> None:
    """A forward's output (its graph saved the BatchNorm weight) alive: ``.cpu()``, ``.half()``,
    ``.to()`` convert every parameter in place, as without the emulator (CPU) and on CUDA; they
    raised "Couldn't swap BatchNorm1d.weight" and left the module half converted."""
    ref = _bn_model()
    model = _bn_model().to(device)
    params = list(model.parameters())
    out = model(torch.randn(8, 4).to(device))
    model.cpu()
    assert all(p.device.type == "cpu" for p in model.parameters())
    model.half()
    assert all(p.dtype == torch.float16 for p in model.parameters())
    model.to(device, torch.float32)
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.device.type == device
        torch.testing.assert_close(p.detach().cpu(), q.detach().half().float())
    del out


@pytest.mark.parametrize(("start", "to"), [("neuron", "cpu"), ("cpu", "neuron")])
def test_backward_through_a_graph_recorded_before_a_move_raises(start: str, to: str) -> None:
    """A forward, then ``.to()`` across host and device, then that forward's backward: it
    computed with the old values and accumulated into the old tensors (the moved parameters
    got no gradient, silently); on CUDA it fails. It now raises, the moved parameters get no
    gradient from it, and a forward after the move trains as on CPU."""
    from neuron_profiler.emulator import native

    if native.loaded() is None:
        pytest.skip("needs the memory extension's device guard (a C++ compiler)")
    x = torch.randn(8, 4)
    ref = _bn_model()
    ref(x).sum().backward()
    model = _bn_model().to(start)
    out = model(x.to(start))
    model.to(to)
    with pytest.raises(RuntimeError, match="recorded before this tensor moved between host"):
        out.sum().backward()
    assert all(p.grad is None for p in model.parameters())
    model(x.to(to)).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.grad.device.type == to
        torch.testing.assert_close(p.grad.cpu(), q.grad)


def test_a_gradient_moves_with_its_parameter() -> None:
    """``.cpu()`` after a backward: the same gradient object, on the host, equal to CPU's; a
    later forward and backward on the host accumulate into it."""
    ref = _bn_model()
    x = torch.randn(8, 4)
    ref(x).sum().backward()
    model = _bn_model().to("neuron")
    model(x.to("neuron")).sum().backward()
    grad = model[0].weight.grad
    model.cpu()
    assert model[0].weight.grad is grad and grad.device.type == "cpu"
    torch.testing.assert_close(grad, ref[0].weight.grad)
    ref(x).sum().backward()
    model(x).sum().backward()
    torch.testing.assert_close(model[0].weight.grad, ref[0].weight.grad)


@pytest.mark.parametrize(("start", "to"), [("neuron", "cpu"), ("cpu", "neuron")])
def test_a_weakly_referenced_parameter_is_refused_before_anything_changes(
    start: str, to: str
) -> None:
    """A weak reference (torch.compile leaves them on the parameters it read) makes the move
    impossible: it is refused with the reason, before anything changed. The gradient was
    dropped and the stale-graph hook set first, so the parameter, still where it was, had lost
    its .grad and its next backward raised the stale-graph error though nothing had moved."""
    import weakref

    m = torch.nn.Linear(4, 4).to(start)
    m(torch.randn(2, 4, device=start)).sum().backward()
    grad = m.weight.grad.clone().cpu()
    held = weakref.ref(m.weight)
    with pytest.raises(RuntimeError, match="weak reference"):
        m.to(to)
    assert held() is m.weight and m.weight.device.type == start
    assert torch.equal(m.weight.grad.cpu(), grad)  # kept, the same values
    m.zero_grad()
    m(torch.randn(2, 4, device=start)).sum().backward()  # nothing moved: no stale-graph error
    assert m.weight.grad is not None
