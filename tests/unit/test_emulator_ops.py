"""A spread of everyday ops (views, in-place, indexing, reductions, RNG, dtype casts) gives the
same results on the emulated device as on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)


def _views_and_inplace(x):
    y = x.t().contiguous().view(-1)[::2]
    y.mul_(2)
    z = x.clone()
    z[1:, :2] = 7.0
    z.transpose(0, 1)[0].add_(1)
    return torch.cat([y, z.flatten(), x.unsqueeze(0).expand(2, -1, -1).sum((0, 1))])


def _indexing(x):
    idx = torch.tensor([2, 0, 1], device=x.device)
    mask = x > 0
    out = x.clone()
    out.masked_fill_(mask, -1.0)
    out.index_add_(0, idx, x[idx])
    return torch.stack(
        [
            out.gather(1, idx[None].expand(3, -1)).sum(1),
            x[idx].amax(1),
            torch.where(mask, x, x * 3).mean(1),
        ]
    )


def _nn_bits(x):
    emb = torch.nn.functional.embedding(torch.tensor([[0, 2], [1, 1]], device=x.device), x)
    logits = torch.nn.functional.layer_norm(emb, (4,)).reshape(4, 4)
    target = torch.tensor([0, 3, 1, 2], device=x.device)
    loss = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
    return torch.cat(
        [logits.softmax(-1).flatten(), loss.reshape(1), torch.nn.functional.gelu(x).flatten()]
    )


def _rng(x):
    torch.manual_seed(7)
    drop = torch.nn.functional.dropout(x, 0.5, training=True)
    noise = torch.rand(3, 4, device=x.device) + torch.randn_like(x)
    return drop + noise


def _casts(x):
    h = x.to(torch.bfloat16) @ x.t().to(torch.bfloat16)
    i = (x * 10).to(torch.int64) // 3
    return torch.cat(
        [
            h.float().flatten(),
            i.float().flatten(),
            x.cumsum(1).flatten(),
            x.sort(1).values.flatten(),
            x.topk(2, 1).values.flatten(),
        ]
    )


@pytest.mark.parametrize(
    "fn", [_views_and_inplace, _indexing, _nn_bits, _rng, _casts], ids=lambda f: f.__name__
)
def test_matches_cpu(fn) -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 4, generator=g)
    expected = fn(x.clone())
    got = fn(x.to("neuron"))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected)


def test_host_side_conveniences_work_as_on_cuda() -> None:
    import copy
    import io

    x = torch.tensor([[1.5, -2.0], [0.25, 4.0]])
    d = x.to("neuron")
    assert d.tolist() == x.tolist() and f"{d.sum():.2f}" == f"{x.sum():.2f}"
    assert float(d[1, 1]) == 4.0 and int(d[0, 0]) == 1 and bool(d[0, 0] > 0)
    leaf = torch.ones(2, device="neuron", requires_grad=True)
    assert repr(leaf) == "tensor([1., 1.], device='neuron:0', requires_grad=True)"
    assert repr(leaf * 2) == "tensor([2., 2.], device='neuron:0', grad_fn=<MulBackward0>)"
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)).to("neuron")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    buf.seek(0)
    state = torch.load(buf, map_location="cpu")  # host tensors, loadable without the device
    assert all(type(t) is torch.Tensor for t in state.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    fresh.load_state_dict(state)
    twin = copy.deepcopy(model)
    assert next(twin.parameters()).device.type == "neuron"
    model.eval()
    twin.eval()
    fresh.eval()
    torch.testing.assert_close(twin(d).cpu(), fresh(x))
    torch.testing.assert_close(model(d).cpu(), fresh(x))


def test_views_launch_no_kernel_but_copies_do() -> None:
    import json

    from neuron_profiler.emulator.runtime import get_runtime
    from neuron_profiler.runtime_trace import format as F

    a = torch.randn(4, 6, device="neuron")
    rt = get_runtime()
    rt.sys_trace_start()
    try:
        v = a.t()
        v.unsqueeze_(0)
        parts = a.split(2)
        c = v.contiguous()  # a real copy kernel
    finally:
        rt.sys_trace_stop()
    kernels = [
        e["data"][F.EXT_KEY][F.X_OP]
        for e in json.loads(rt.sys_trace_fetch())["events"]
        if e["event_type"] == F.NC_EXEC_RUNNING and e["phase"] == F.START
    ]
    assert kernels == ["aten::clone"]
    assert v.shape == (1, 6, 4) and len(parts) == 2 and torch.equal(c.cpu()[0], a.cpu().t())


def test_checkpoints_of_device_tensors_load_back_onto_the_device_as_on_cuda() -> None:
    """A device tensor is saved tagged ``neuron:N``: ``torch.load`` puts it back there (with
    ``weights_only`` too), ``map_location="cpu"`` or a callable keeps it on the host; pickle
    round-trips it (what object collectives do)."""
    import io
    import pickle

    torch.manual_seed(3)
    model = torch.nn.Linear(4, 3)
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("neuron")
    leaf = torch.randn(5, device="neuron:1", requires_grad=True)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "leaf": leaf}, buf)
    for kwargs, device in (
        ({}, "neuron:0"),
        ({"weights_only": True}, "neuron:0"),
        ({"map_location": "cpu"}, "cpu"),
        ({"map_location": lambda storage, loc: storage}, "cpu"),
        ({"map_location": "neuron:1"}, "neuron:1"),
    ):
        buf.seek(0)
        got = torch.load(buf, **kwargs)
        for k, v in got["model"].items():
            assert str(v.device) == device, (kwargs, k)
            torch.testing.assert_close(v.cpu(), ref[k])
        assert got["leaf"].requires_grad and got["leaf"].is_leaf
    buf.seek(0)
    assert torch.load(buf)["leaf"].device == torch.device("neuron", 1)
    back = pickle.loads(pickle.dumps(leaf.detach()))
    assert back.device == torch.device("neuron", 1) and torch.equal(back.cpu(), leaf.cpu())


def test_saved_views_and_tied_weights_keep_their_sharing_as_on_cpu() -> None:
    """A view and its base, tied weights: one stored storage, as torch.save on CPU (and CUDA)
    writes them: the same file size as the CPU checkpoint, and after loading (onto the device
    or the host) a write through one shows through the other. A write between two saves is in
    the second (no stale copy)."""
    import io

    def saved(obj: object) -> io.BytesIO:
        buf = io.BytesIO()
        torch.save(obj, buf)
        buf.seek(0)
        return buf

    host = torch.arange(6.0)
    cpu_file = saved({"a": host, "v": host[2:4]})
    a = host.to("neuron:1")
    device_file = saved({"a": a, "v": a[2:4]})
    assert len(device_file.getvalue()) == len(cpu_file.getvalue())
    for location in (None, "neuron", "cpu"):
        device_file.seek(0)
        got = torch.load(device_file, map_location=location)
        got["a"].add_(100)
        assert got["v"].cpu().tolist() == [102.0, 103.0], location
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight  # tied, as a language model's embedding and output layer
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    cpu_size = len(saved(model.state_dict()).getvalue())
    model.to("neuron")
    got = torch.load(saved(model.state_dict()))
    assert len(saved(model.state_dict()).getvalue()) == cpu_size
    got["emb.weight"].zero_()
    assert got["head.weight"].abs().sum().item() == 0
    a.add_(1)
    assert torch.load(saved({"a": a}))["a"].cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_map_location_neuron_loads_host_checkpoints_onto_the_device() -> None:
    """``map_location="neuron"`` / ``torch.device("neuron:1")`` / a dict: device tensors equal to
    the CPU load; tensors sharing a storage in the file share device memory, as on CUDA."""
    import io

    w = torch.arange(12.0).reshape(3, 4)
    buf = io.BytesIO()
    torch.save({"w": w, "row": w[1], "n": torch.tensor([7])}, buf)
    for loc, device in (
        ("neuron", "neuron:0"),
        (torch.device("neuron:1"), "neuron:1"),
        ({"cpu": "neuron:1"}, "neuron:1"),
    ):
        for weights_only in (True, False):
            buf.seek(0)
            got = torch.load(buf, map_location=loc, weights_only=weights_only)
            assert {str(v.device) for v in got.values()} == {device}
            for k, v in got.items():
                assert torch.equal(v.cpu(), {"w": w, "row": w[1], "n": torch.tensor([7])}[k])
            got["w"].add_(1.0)  # the row is a view of the same device memory
            assert torch.equal(got["row"].cpu(), w[1] + 1)
            assert torch.equal((got["w"] * got["n"]).cpu(), (w + 1) * 7)
    buf.seek(0)
    before = torch.neuron.memory_allocated(0)
    got = torch.load(buf, map_location="neuron")
    # one device buffer per stored storage: w's (the row is a view of it) and n's
    assert torch.neuron.memory_allocated(0) - before == w.nbytes + 8
    del got
    buf.seek(0)
    with pytest.raises(RuntimeError, match="device_count"):
        torch.load(buf, map_location="neuron:5")
