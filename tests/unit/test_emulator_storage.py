"""Storage operations FSDP relies on behave on the emulated device as on CPU: storage resize
(free and regrow under views autograd saved), ``set_``, ``.data =`` within the device and across
host and device, views into flat buffers, ``split_with_sizes_copy``, ``_foreach_copy_``, and the
into-tensor all-gather / reduce-scatter (sync and async) on the collective queue."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = pytest.mark.torch
DEVICES = ["cpu", "neuron"]


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)
    yield
    if get_runtime().capturing:
        get_runtime().sys_trace_stop()
    emu.enable(cores=2, numerics=True)


def _free_regrow_backward(device: str) -> dict[str, torch.Tensor]:
    """FSDP2's unsharded parameter: a view of a flat all-gather buffer, saved by autograd in
    forward, freed (storage resized to 0) and regrown and refilled before backward."""
    flat = torch.empty(12, device=device)
    flat.copy_(torch.arange(12.0))
    weight = torch.nn.Parameter(torch.as_strided(flat, (3, 4), (4, 1), 0))
    x = torch.linspace(-1, 1, 8).view(2, 4).to(device).requires_grad_()
    out = x @ weight.t()  # saves weight (a view of flat) for x's gradient
    storage = flat.untyped_storage()
    storage.resize_(0)
    freed = (storage.size(), weight.untyped_storage().size())
    storage.resize_(12 * 4)
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(flat):
        flat.copy_(torch.arange(12.0) * -2)  # the next all-gather writes new values, as FSDP
    out.sum().backward()
    return {
        "freed": torch.tensor(freed),
        "regrown": torch.tensor(weight.untyped_storage().size()),
        "weight": weight.detach().cpu(),
        "x_grad": x.grad.cpu(),
        "same_memory": torch.tensor(
            weight.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
        ),
    }


def test_storage_resize_frees_and_regrows_under_saved_views_as_on_cpu() -> None:
    cpu, dev = (_free_regrow_backward(d) for d in DEVICES)
    assert cpu["freed"].tolist() == [0, 0]  # the CPU reference frees what every view sees
    for key in cpu:
        assert torch.equal(dev[key], cpu[key]), key
    # backward used the regrown memory's values (-2x), not the ones saved in forward
    assert torch.equal(dev["x_grad"], (torch.arange(12.0) * -2).view(3, 4).sum(0).expand(2, 4))


def test_storage_resize_in_timing_mode_large_buffer() -> None:
    """Timing mode's allocations are resizable too (a 4 MiB all-gather buffer)."""
    emu.enable(cores=2, numerics=False)
    flat = torch.empty(1 << 20, device="neuron")
    view = flat.view(1024, 1024)
    flat.untyped_storage().resize_(0)
    assert view.untyped_storage().size() == 0
    flat.untyped_storage().resize_(4 << 20)
    assert view.untyped_storage().size() == 4 << 20 and view.shape == (1024, 1024)


def _set_ops(device: str) -> list[torch.Tensor]:
    src = torch.arange(10.0, device=device)
    a = torch.empty(0, device=device).set_(src)  # tensor source: aliases src
    b = torch.empty(0, device=device).set_(src.untyped_storage(), 2, (2, 3), (3, 1))
    src.mul_(10)  # both see the write
    return [a.cpu(), b.cpu(), torch.tensor(b.storage_offset())]


def test_set_aliases_tensor_and_storage_as_on_cpu() -> None:
    cpu, dev = (_set_ops(d) for d in DEVICES)
    assert torch.equal(cpu[1], torch.tensor([[20.0, 30, 40], [50, 60, 70]]))
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d)


def _set_data_within(device: str) -> list[torch.Tensor]:
    p = torch.nn.Parameter(torch.zeros(4, device=device))
    ident = id(p)
    flat = torch.arange(12.0, device=device)
    p.data = flat[4:10].view(2, 3)  # FSDP1's `param.data = view of the flat parameter`
    flat.add_(100)  # the parameter aliases the flat buffer
    p.data.mul_(-1)  # and the flat buffer aliases the parameter
    assert id(p) == ident and p.requires_grad and isinstance(p, torch.nn.Parameter)
    return [p.detach().cpu(), flat.cpu(), torch.tensor(list(p.shape))]


def test_set_data_within_the_device_as_on_cpu() -> None:
    cpu, dev = (_set_data_within(d) for d in DEVICES)
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d)


def test_set_data_host_to_device_keeps_the_parameter_object() -> None:
    """FSDP moving a CPU module: ``param.data = param.to(device)`` (on CUDA a shallow copy)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # made before the move, as FSDP1 allows
    weight = model.weight
    weight.grad = torch.ones(3, 4)
    weight.tag = "kept"  # attributes survive
    for p in model.parameters():
        p.data = p.to("neuron")
    assert model.weight is weight and weight.device == torch.device("neuron", 0)
    assert isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert weight.tag == "kept" and weight.grad.device.type == "neuron"
    x = torch.randn(2, 4)
    for m, inp in ((model, x.to("neuron")), (ref, x)):
        o = torch.optim.SGD(m.parameters(), lr=0.1) if m is ref else opt
        o.zero_grad()
        m(inp).square().sum().backward()
        o.step()
    torch.testing.assert_close(model.weight.detach().cpu(), ref.weight.detach())
    torch.testing.assert_close(model.bias.detach().cpu(), ref.bias.detach())
    weight.data = weight.cpu()  # and back: a host tensor again, same object
    assert model.weight is weight and weight.device.type == "cpu"
    assert isinstance(weight, torch.nn.Parameter)
    torch.testing.assert_close(weight.detach(), ref.weight.detach())


def _flat_views(device: str) -> list[torch.Tensor]:
    """FSDP1's flat parameter: one buffer, parameters as views of it, same storage checks."""
    flat = torch.zeros(10, device=device)
    views = [v.view(s) for v, s in zip(torch.split(flat, [6, 4]), [(2, 3), (4,)], strict=True)]
    other = torch.zeros(10, device=device)
    same = [views[0].untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()]
    same.append(other.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr())
    same.append(views[1].data_ptr() == flat.data_ptr() + 6 * flat.element_size())
    flat.copy_(torch.arange(10.0))
    views[1].mul_(2)
    return [views[0].cpu(), views[1].cpu(), flat.cpu(), torch.tensor(same)]


def test_views_into_flat_buffers_alias_as_on_cpu() -> None:
    cpu, dev = (_flat_views(d) for d in DEVICES)
    assert cpu[3].all()
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d)


def _copies(device: str) -> list[torch.Tensor]:
    world, sizes = 2, [6, 2, 4]
    gathered = torch.arange(24.0, device=device).view(world, -1)
    out = [torch.empty(world, n, device=device) for n in sizes]
    torch.split_with_sizes_copy(gathered, sizes, dim=1, out=out)
    fsdp_out = [torch.empty(world, n, device=device) for n in sizes]
    torch.ops.fsdp.split_with_sizes_copy(gathered, sizes, dim=1, out=fsdp_out)
    flat = torch.zeros(12, device=device)
    srcs = [torch.full((n,), float(i + 1), device=device) for i, n in enumerate(sizes)]
    torch._foreach_copy_(list(torch.split(flat, sizes)), srcs)  # into views of one buffer
    return [*out, *fsdp_out, flat.cpu()]


def test_split_with_sizes_copy_and_foreach_copy_as_on_cpu() -> None:
    import torch.distributed.fsdp  # noqa: F401  (registers torch.ops.fsdp)

    cpu, dev = (_copies(d) for d in DEVICES)
    assert torch.equal(cpu[-1], torch.tensor([1.0] * 6 + [2.0] * 2 + [3.0] * 4))
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d.cpu())


@pytest.fixture
def group():
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore:`torch.distributed.*` is deprecated:FutureWarning")
@pytest.mark.parametrize("async_op", [False, True])
def test_all_gather_and_reduce_scatter_into_tensor_on_the_collective_queue(
    group, async_op: bool
) -> None:
    """Equal to CPU; one collective each on the collective queue with the whole buffer's bytes
    (the gathered output, the reduce-scatter input), the group's ranks, the ring algorithm."""
    results = {}
    rt = get_runtime()
    for device in DEVICES:
        inp = torch.arange(6.0, device=device)
        gathered = torch.empty(6, device=device)
        scattered = torch.empty(6, device=device)
        if device == "neuron":
            torch.neuron.synchronize()
            rt.sys_trace_start()
        works = [
            dist.all_gather_into_tensor(gathered, inp, async_op=async_op),
            dist.reduce_scatter_tensor(scattered, inp * 2, async_op=async_op),
        ]
        if async_op:
            for w in works:
                w.wait()
        results[device] = (gathered.cpu(), scattered.cpu())
    rt.sys_trace_stop()
    for c, d in zip(results["cpu"], results["neuron"], strict=True):
        assert torch.equal(c, d)
    events = json.loads(rt.sys_trace_fetch())["events"]
    cc = [
        e["data"][F.EXT_KEY]
        for e in events
        if e["event_type"] == F.CC_RUNNING and e["phase"] == F.START
    ]
    assert [(x[F.X_COLLECTIVE_OP], x[F.X_BYTES]) for x in cc] == [
        ("allgather", 24),
        ("reduce_scatter", 24),
    ]
    for x in cc:
        assert x[F.X_QUEUE] == F.QUEUE_COLLECTIVE and x[F.X_RANKS] == [0]
        assert x[F.X_ALGORITHM] == "ring" and x[F.X_MODELLED]
