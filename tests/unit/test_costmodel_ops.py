"""The cost model's formulas against flops and bytes worked out by hand."""

from __future__ import annotations

import pytest

from neuron_profiler.costmodel.chips import CHIPS, chip, chip_for_device
from neuron_profiler.costmodel.fallbacks import falls_back
from neuron_profiler.costmodel.ops import matrix_flops, op_cost
from neuron_profiler.costmodel.roofline import collective_s


def test_mm_from_trace_dims() -> None:
    # (64 x 128) @ (128 x 32) float32: 2*64*128*32 flops; bytes: 8192 + 4096 in, 2048 out, x4
    c = op_cost("aten::mm", [[64, 128], [128, 32]], ["float", "float"])
    assert c.flops == 524_288
    assert c.bytes_moved == (8192 + 4096 + 2048) * 4
    assert c.matrix and c.dtype == "float32"


def test_addmm_counts_the_bias_add() -> None:
    # the resnet50 trace's fc layer: bias (1000), x (32 x 2048), w.T (2048 x 1000)
    c = op_cost("aten::addmm", [[1000], [32, 2048], [2048, 1000], [], []], ["float"] * 3 + [""] * 2)
    assert c.flops == 2 * 32 * 2048 * 1000 + 32 * 1000
    assert c.bytes_moved == (1000 + 32 * 2048 + 2048 * 1000 + 32 * 1000) * 4


def test_linear_transposes_its_weight_and_bf16_halves_the_bytes() -> None:
    c = op_cost("aten::linear", [[8, 16, 64], [32, 64], [32]], ["c10::BFloat16"] * 3)
    assert c.flops == 2 * 128 * 64 * 32 + 128 * 32
    assert c.bytes_moved == (8 * 16 * 64 + 32 * 64 + 32 + 128 * 32) * 2
    assert c.dtype == "bfloat16"


def test_bmm_and_attention() -> None:
    c = op_cost("aten::bmm", [[4, 10, 20], [4, 20, 30]], ["float", "float"])
    assert c.flops == 2 * 4 * 10 * 20 * 30
    q = [2, 8, 128, 64]  # (batch, heads, seq, head_dim): QK^T and PV, 2 flops each
    c = op_cost("aten::_scaled_dot_product_efficient_attention", [q, q, q], ["c10::Half"] * 3)
    assert c.flops == 4 * 2 * 8 * 128 * 128 * 64
    assert c.matrix and c.dtype == "float16"


def test_cudnn_convolution_at_stride_one() -> None:
    # resnet50's first conv as recorded: 7x7, 3 -> 64 channels, output priced at the input's size
    c = op_cost("aten::cudnn_convolution", [[32, 3, 224, 224], [64, 3, 7, 7]], ["float"] * 2)
    out = 32 * 64 * 224 * 224
    assert c.flops == 2 * out * 3 * 49
    assert c.bytes_moved == (32 * 3 * 224 * 224 + 64 * 3 * 49 + out) * 4
    # FP32 convolutions compute on TF32 tensor cores where a chip has them (cuDNN's default):
    # A100 156 TFLOPS, V100 (none) its FP32 15.7, trn2 its FP32 matrix rate
    assert c.dtype == "tfloat32"
    assert CHIPS["a100"].matrix_flops_per_s(c.dtype) == pytest.approx(156e12)
    assert CHIPS["v100"].matrix_flops_per_s(c.dtype) == pytest.approx(15.7e12)
    assert CHIPS["trn2"].matrix_flops_per_s(c.dtype) == CHIPS["trn2"].matrix_flops_per_s("float32")
    # ... and FP32 matrix products do not (PyTorch's matmul default)
    assert op_cost("aten::mm", [[4, 4], [4, 4]], ["float"] * 2).dtype == "float32"


def test_emulator_signature_of_convolution_backward() -> None:
    # grad_out (1, 8, 4, 4), input (1, 3, 4, 4), weight (8, 3, 3, 3); both gradients asked for
    fwd = 2 * 128 * 3 * 9
    flops = matrix_flops(
        "aten::convolution_backward",
        [(1, 8, 4, 4), (1, 3, 4, 4), (8, 3, 3, 3)],
        out_numel=0,
        output_mask=(True, True, False),
    )
    assert flops == 2 * fwd + 128


def test_elementwise_reduction_embedding_copy() -> None:
    add = op_cost("aten::add_", [[1000], [1000], []], ["float", "float", "Scalar"])
    assert (add.flops, add.bytes_moved, add.matrix) == (1000, 3 * 4000, False)
    soft = op_cost("aten::_softmax", [[10, 100], [], []], ["c10::Half", "", ""])
    assert (soft.flops, soft.bytes_moved) == (5 * 1000, 2 * 2000)
    total = op_cost("aten::sum", [[10, 100]], ["float"])
    assert (total.flops, total.bytes_moved) == (1000, 4000 + 4)
    emb = op_cost("aten::embedding", [[50000, 768], [4, 128]], ["float", "long int"])
    assert (emb.flops, emb.bytes_moved) == (0, 4 * 128 * 8 + 2 * 512 * 768 * 4)
    copy = op_cost("aten::copy_", [[3, 224, 224], [3, 224, 224], []], ["float", "c10::Half", ""])
    assert (copy.flops, copy.bytes_moved) == (0, 2 * 3 * 224 * 224 * 4)


def test_no_tensor_costs_nothing() -> None:
    assert op_cost("aten::item", [[]], ["Scalar"]).bytes_moved == 0


def test_ring_allreduce_by_hand() -> None:
    # 8 ranks, 64 MB on H100 links (450 GB/s a direction): 14 steps of 5 µs + 2*7/8*64e6 / 450e9
    s = collective_s(chip("h100"), nbytes=64e6, world=8, collective="allreduce")
    assert s == pytest.approx(14 * 5e-6 + 2 * 7 / 8 * 64e6 / 450e9)
    assert collective_s(chip("h100"), nbytes=64e6, world=1, collective="allreduce") == 5e-6


def test_chip_profiles_and_names() -> None:
    assert chip_for_device("Tesla V100-DGXS-32GB").name == "v100"
    assert chip_for_device("NVIDIA A100-PG509-200").name == "a100"
    assert chip_for_device("NVIDIA A100-SXM4-80GB").name == "a100-80gb"
    assert chip_for_device("NVIDIA H200").name == "h200"
    assert chip_for_device("ARTEMIS") is None
    # per logical core: trn2 667 TFLOPS BF16 over 4 logical cores; a GPU is one core
    assert CHIPS["trn2"].matrix_flops_per_s("bfloat16") == pytest.approx(166.75e12)
    assert CHIPS["h100"].matrix_flops_per_s("bfloat16") == pytest.approx(989.4e12)
    assert CHIPS["v100"].matrix_flops_per_s("float32") == pytest.approx(15.7e12)
    assert CHIPS["h200"].hbm_bytes_per_s() == pytest.approx(4.8e12)


def test_fallback_table() -> None:
    assert falls_back("aten::nonzero", "int64")
    assert falls_back("aten::add_", "float64")
    assert not falls_back("aten::add_", "float32")


def test_foreach_over_tensor_lists_as_the_emulator_prices_it() -> None:
    """SGD's momentum update on a CPU trace: _foreach_add_(bufs, grads, alpha) over two lists of
    (64 x 32) and (32): both lists read, the first written: 3 x 2080 floats; one add per element
    of the first list. The emulator's rule on the same tensors gives the same cost."""
    dims = [[[64, 32], [32]], [[64, 32], [32]], []]
    c = op_cost("aten::_foreach_add_", dims, ["TensorList", "TensorList", "Scalar"])
    assert c.bytes_moved == 3 * 2080 * 4 and c.flops == 2080
    assert not c.matrix and c.dtype == "float32"
    torch = pytest.importorskip("torch")  # the emulator's side needs torch
    from neuron_profiler.emulator.costs import op_cost as emulated_cost

    bufs = [torch.zeros(64, 32), torch.zeros(32)]
    grads = [torch.zeros(64, 32), torch.zeros(32)]
    e = emulated_cost("aten::_foreach_add_", inputs=bufs + grads, outputs=bufs, args=())
    assert (e.flops, e.bytes_moved) == (c.flops, c.bytes_moved)


def test_matmul_batch_dims_broadcast() -> None:
    """(2, 1, 64, 32) @ (3, 32, 16): the batch shapes broadcast to (2, 3), six products of
    2 x 64 x 32 x 16 flops each and 6 x 64 x 16 outputs (the larger batch alone, 3, halved
    both); shapes that do not broadcast are priced as vector work."""
    from neuron_profiler.costmodel.ops import mm_flops

    c = op_cost("aten::matmul", [[2, 1, 64, 32], [3, 32, 16]], ["float", "float"])
    assert c.flops == 6 * 2 * 64 * 32 * 16 == mm_flops((2, 1, 64, 32), (3, 32, 16))
    assert c.bytes_moved == (2 * 64 * 32 + 3 * 32 * 16 + 6 * 64 * 16) * 4
    assert c.matrix
    assert not op_cost("aten::matmul", [[2, 64, 32], [3, 32, 16]], ["float", "float"]).matrix


@pytest.mark.parametrize(
    "name",
    [
        "aten::_scaled_dot_product_flash_attention",
        "aten::scaled_dot_product_attention",
        "aten::_flash_attention_forward",
    ],
)
def test_attention_priced_by_one_formula(name: str) -> None:
    """q, k, v (2, 8, 128, 64): 4 x (2 x 8 x 128) x 128 x 64 flops, from op_cost and from
    matrix_flops (the emulator's entry) alike, for every name of the op."""

    q = [2, 8, 128, 64]
    want = 4 * 2 * 8 * 128 * 128 * 64
    assert op_cost(name, [q, q, q], ["float"] * 3).flops == want
    assert matrix_flops(name, [tuple(q)] * 3, 0) == want
