"""Sparse COO tensors on the emulated device work as on CUDA, in both modes: a sparse device
tensor keeps its layout (``is_sparse``, indices, values, ``coalesce``), its ops equal the same
ops on CPU, and timing mode computes them for real (their indices are data, as ``nonzero``'s
are). Before, numerics mode failed at ``s.to("neuron")`` and timing mode turned the tensor into
dense zeros (``to_dense()`` of it was all zeros). Compressed layouts are refused in one line."""

from __future__ import annotations

import io
import warnings

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.errors import EmulatorError  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:Sparse invariant checks"),
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support"),
]


@pytest.fixture(params=[True, False], ids=["numerics", "timing"])
def numerics(request: pytest.FixtureRequest):
    emu.enable(cores=1, numerics=request.param)
    yield request.param
    emu.enable(cores=1, numerics=True)


def _sparse() -> torch.Tensor:
    i = torch.tensor([[0, 1, 2, 0, 199], [2, 0, 1, 2, 150]])
    v = torch.tensor([3.0, 4.0, 5.0, 1.0, -2.0])
    return torch.sparse_coo_tensor(i, v, (200, 300))  # dense: 60,000 elements (modelled size)


def _dense(n: int) -> torch.Tensor:
    return torch.arange(300.0 * n).reshape(300, n) / 1000


CASES = {
    "to_dense": lambda s, d: s.to_dense(),
    "coalesce_values": lambda s, d: s.coalesce().values(),
    "coalesce_indices": lambda s, d: s.coalesce().indices(),
    "add": lambda s, d: (s + s).to_dense(),
    "mul": lambda s, d: (s * 2).to_dense(),
    "transpose": lambda s, d: s.t().to_dense(),
    "sparse_mm": lambda s, d: torch.sparse.mm(s, d),
    "mm": lambda s, d: s @ d,
    "sum": lambda s, d: torch.sparse.sum(s),
    "softmax": lambda s, d: torch.sparse.softmax(s.coalesce(), 1).to_dense(),
    "to_sparse": lambda s, d: (s.to_dense()[:100, :60] * 3).to_sparse().to_dense(),
}


@pytest.mark.parametrize("case", CASES)
def test_sparse_ops_equal_cpu(numerics: bool, case: str) -> None:
    fn = CASES[case]
    expected = fn(_sparse(), _dense(64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", emu.ModelledValueWarning)  # nothing read is modelled
        # sparse.mm's output starts as zeros, a modelled zero_ (docs: reading it warns though
        # its values are right)
        warnings.filterwarnings("ignore", "value of aten::zero_", emu.ModelledValueWarning)
        got = fn(_sparse().to("neuron"), _dense(64).to("neuron"))
        assert got.device == torch.device("neuron", 0) and got.layout == expected.layout
        torch.testing.assert_close(got.cpu(), expected)


def test_sparse_device_tensors_keep_their_layout(numerics: bool) -> None:
    s = _sparse()
    d = s.to("neuron")
    assert d.is_sparse and d.layout == torch.sparse_coo and d.device.type == "neuron"
    assert d._nnz() == 5 and d.sparse_dim() == 2 and not d.is_coalesced()
    assert d._indices().device.type == "neuron"
    back = d.cpu()
    assert back.is_sparse and torch.equal(back.to_dense(), s.to_dense())
    made = torch.sparse_coo_tensor(s._indices(), s._values(), s.shape, device="neuron")
    parts = torch.sparse_coo_tensor(s._indices().to("neuron"), s._values().to("neuron"), s.shape)
    for t in (made, parts):
        assert t.is_sparse and t.device.type == "neuron"
        assert torch.equal(t.to_dense().cpu(), s.to_dense())
    buf = io.BytesIO()
    torch.save(d, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded.is_sparse and loaded.device.type == "neuron"
    assert torch.equal(loaded.to_dense().cpu(), s.to_dense())


def test_sparse_embedding_trains_equal_to_cpu(numerics: bool) -> None:
    """``nn.Embedding(sparse=True)``: sparse gradients on the device, SGD and SparseAdam. The
    table is large, so timing mode models the lookup (its gradient's values are zeros, and
    reading them warns); the gradient is sparse in both modes."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5000, 16, sparse=True)
    ref = torch.nn.Embedding(5000, 16, sparse=True)
    ref.load_state_dict(emb.state_dict())
    emb.to("neuron")
    idx = torch.tensor([[1, 2, 1], [4097, 0, 2]])
    for opt_cls in (torch.optim.SGD, torch.optim.SparseAdam):
        opt, ref_opt = opt_cls(list(emb.parameters()), lr=0.1), opt_cls(ref.parameters(), lr=0.1)
        emb(idx.to("neuron")).square().sum().backward()
        ref(idx).square().sum().backward()
        grad, ref_grad = emb.weight.grad, ref.weight.grad
        assert grad.is_sparse and grad.device.type == "neuron"
        assert torch.equal(grad.coalesce().indices().cpu(), ref_grad.coalesce().indices())
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        if numerics:
            torch.testing.assert_close(grad.cpu().to_dense(), ref_grad.to_dense())
            torch.testing.assert_close(emb.weight.detach().cpu(), ref.weight.detach())


def test_compressed_layouts_are_refused_in_one_line() -> None:
    emu.enable(cores=1)
    csr = torch.eye(3).to_sparse_csr()
    with pytest.raises(EmulatorError, match=r"sparse compressed layouts .* use COO"):
        csr.to("neuron")
