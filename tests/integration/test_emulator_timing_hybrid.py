"""Hybrid timing mode (issue 24): small ops are computed for real, large floating-point work is
modelled (zeros), no output ever holds uninitialised memory, and a program that reads modelled
values is told so once. References are CPU results of the same code, or zeros."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator import outputs  # noqa: E402
from neuron_profiler.emulator.modelled import ModelledValueWarning  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as RF  # noqa: E402

pytestmark = pytest.mark.torch
F = torch.nn.functional
TESTS = Path(__file__).resolve().parents[1]
SMALL, LARGE = 16, 400_000  # elements: under every threshold / over every threshold


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1, numerics=False)
    yield
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)


def _meta(shape: tuple, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


# -- the rule ----------------------------------------------------------------------------------
def test_rule_thresholds_on_elements_dtype_flops_and_op() -> None:
    real = outputs.computes_for_real
    i64 = torch.int64
    # a unary float op reads n and writes n: computed up to REAL_MAX_ELEMENTS in all
    half = outputs.REAL_MAX_ELEMENTS // 2
    assert real("aten::exp", [_meta((half,))], [_meta((half,))])
    assert not real("aten::exp", [_meta((half + 1,))], [_meta((half + 1,))])
    # every tensor integer or bool: the index limit
    n = outputs.REAL_MAX_INDEX_ELEMENTS // 2
    assert real("aten::cumsum", [_meta((n,), i64)], [_meta((n,), i64)])
    assert not real("aten::cumsum", [_meta((n + 1,), i64)], [_meta((n + 1,), i64)])
    # one float tensor among them: the float limit (a float comparison writing bool)
    assert not real("aten::lt", [_meta((n,)), _meta((n,))], [_meta((n,), torch.bool)])
    # flops: a 64x64x32 matmul is 262,144 flops (the limit), 64x64x33 is over it
    a = _meta((64, 64))
    assert real("aten::mm", [a, _meta((64, 32))], [_meta((64, 32))], (a, _meta((64, 32))))
    assert not real("aten::mm", [a, _meta((64, 33))], [_meta((64, 33))], (a, _meta((64, 33))))
    # sorting and sampling count HOST_HEAVY_FACTOR times their elements
    m = outputs.REAL_MAX_ELEMENTS // (3 * outputs.HOST_HEAVY_FACTOR)
    sort_out = [_meta((m,)), _meta((m,), i64)]
    assert real("aten::sort", [_meta((m,))], sort_out)
    assert real("aten::exp", [_meta((8 * m,))], [_meta((8 * m,))])
    assert not real("aten::sort", [_meta((8 * m,))], [_meta((8 * m,)), _meta((8 * m,), i64)])
    # allocations never (their real output is uninitialised memory); empty tensors always
    assert not real("aten::empty", [], [_meta((1,))])
    assert real("aten::add", [_meta((0,)), _meta((0,))], [_meta((0,))])


@pytest.mark.filterwarnings("ignore::neuron_profiler.emulator.modelled.ModelledValueWarning")
def test_small_ops_computed_large_ones_modelled_shapes_always_cpu() -> None:
    """Replaces the all-zeros check of the timing-mode tests: the size decides."""
    cases = [
        lambda a, b, i: a @ b,
        lambda a, b, i: (a.t() @ a).sum(0),
        lambda a, b, i: torch.softmax(a, -1),
        lambda a, b, i: torch.cat([a, a], 1),
        lambda a, b, i: a.index_select(0, i),
        lambda a, b, i: a.to(torch.bfloat16),
        lambda a, b, i: F.gelu(a).transpose(0, 1).contiguous(),
        lambda a, b, i: a.max(dim=1),
    ]
    g = torch.Generator().manual_seed(0)
    for rows, computed in ((8, True), (1024, False)):
        a, b = torch.randn(rows, 16, generator=g), torch.randn(16, 4, generator=g)
        idx = torch.tensor([3, 0, 7])
        for fn in cases:
            want = fn(a, b, idx)
            got = fn(a.to("neuron"), b.to("neuron"), idx.to("neuron"))
            pairs = zip(*[x if isinstance(x, tuple) else (x,) for x in (want, got)], strict=True)
            for w, o in pairs:
                assert (o.shape, o.dtype, o.stride()) == (w.shape, w.dtype, w.stride())
                expect = w if computed else torch.zeros_like(w)
                assert torch.equal(o.cpu(), expect), (rows, fn)
        x = a.to("neuron")
        assert x.add_(1.0) is x
        assert torch.equal(x.cpu(), a + 1.0 if computed else a)  # large in place: not computed
        out = torch.empty(0, device="neuron")
        torch.mm(a.to("neuron"), b.to("neuron"), out=out)  # out= resized, its new storage zeros
        assert torch.equal(out.cpu(), a @ b if computed else torch.zeros(rows, 4))


def test_arange_masks_and_indices_are_right() -> None:
    assert torch.arange(4, device="neuron").cpu().tolist() == [0, 1, 2, 3]
    assert torch.arange(2, 10, 2, device="neuron").cpu().tolist() == [2, 4, 6, 8]
    assert torch.full((3,), 7, device="neuron").cpu().tolist() == [7, 7, 7]
    seq = torch.arange(6, device="neuron")
    causal = seq[None, :] <= seq[:, None]
    assert torch.equal(causal.cpu(), torch.ones(6, 6, dtype=torch.bool).tril())
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).to("neuron")
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    assert positions.cpu().tolist() == [[0, 1, 2, 1, 1], [0, 1, 2, 3, 4]]
    lengths = mask.sum(-1)
    assert lengths.cpu().tolist() == [3, 5] and int(lengths.max()) == 5
    last = torch.gather(seq.expand(2, 6), 1, (lengths - 1)[:, None])
    assert last.cpu().tolist() == [[2], [4]]
    assert torch.nonzero(mask[0]).flatten().cpu().tolist() == [0, 1, 2]


# -- no uninitialised memory -------------------------------------------------------------------
def _factories(n: int) -> dict[str, Any]:
    m = int(n**0.5)
    long = torch.long
    return {
        "empty": lambda d: torch.empty(n, device=d),
        "empty_like": lambda d: torch.empty_like(torch.ones(n, device=d)),
        "empty_strided": lambda d: torch.empty_strided((m, m), (1, m), device=d),
        "new_empty": lambda d: torch.ones(2, device=d).new_empty(n),
        "new_empty_strided": lambda d: torch.ones(2, device=d).new_empty_strided((m, m), (1, m)),
        "resize_": lambda d: torch.empty(0, device=d).resize_(n),
        "zeros": lambda d: torch.zeros(n, device=d),
        "ones": lambda d: torch.ones(n, device=d),
        "full": lambda d: torch.full((n,), 3.5, device=d),
        "full_int": lambda d: torch.full((n,), 7, device=d),
        "arange": lambda d: torch.arange(n, device=d),
        "arange_float": lambda d: torch.arange(0, n / 2, 0.5, device=d),
        "arange_out": lambda d: torch.arange(n, out=torch.empty(0, dtype=long, device=d)),
        "linspace": lambda d: torch.linspace(0, 1, n, device=d),
        "logspace": lambda d: torch.logspace(0, 1, n, device=d),
        "eye": lambda d: torch.eye(m, device=d),
        "rand": lambda d: torch.rand(n, device=d),
        "randn": lambda d: torch.randn(n, device=d),
        "randint": lambda d: torch.randint(0, 9, (n,), device=d),
        "randperm": lambda d: torch.randperm(n, device=d),
        "normal": lambda d: torch.normal(0.0, 1.0, (n,), device=d),
        "bernoulli": lambda d: torch.bernoulli(torch.full((n,), 0.5, device=d)),
        "rand_like": lambda d: torch.rand_like(torch.ones(n, device=d)),
        "zeros_like": lambda d: torch.zeros_like(torch.ones(n, device=d)),
        "full_like": lambda d: torch.full_like(torch.ones(n, device=d), 2),
        "new_zeros": lambda d: torch.ones(2, device=d).new_zeros(n),
        "new_ones": lambda d: torch.ones(2, device=d).new_ones(n),
        "new_full": lambda d: torch.ones(2, device=d).new_full((n,), 5.0),
        "tril_indices": lambda d: torch.tril_indices(m, m, device=d),
        "scalar_tensor": lambda d: torch.scalar_tensor(3.0, device=d),
    }


_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_"}


@pytest.mark.filterwarnings("ignore::neuron_profiler.emulator.modelled.ModelledValueWarning")
@pytest.mark.parametrize("n", [SMALL, LARGE])
def test_factories_are_cpu_values_or_zeros_never_uninitialised(n: int) -> None:
    """Small factories equal CPU's (same seed), large ones are zeros; allocations are zeros at
    any size; two runs give the same values. ``empty`` on CPU is uninitialised: only zeros count."""
    for name, make in _factories(n).items():
        torch.manual_seed(0)
        want = make("cpu")
        runs = []
        for _ in range(2):
            torch.manual_seed(0)
            out = make("neuron")
            assert (out.shape, out.dtype, out.stride()) == (want.shape, want.dtype, want.stride())
            runs.append(out.cpu())
        assert torch.equal(runs[0], runs[1]), name
        if name in _ALLOCATIONS or want.numel() > 1_000:
            assert not runs[0].any(), name  # zeros: allocations, and large work modelled
        else:
            assert torch.equal(runs[0], want), name


def _families() -> dict[str, Any]:
    return {
        "add": lambda a, b, i, m: a + b,
        "mul_scalar": lambda a, b, i, m: a * 3,
        "exp": lambda a, b, i, m: a.exp(),
        "where": lambda a, b, i, m: torch.where(m, a, b),
        "clamp": lambda a, b, i, m: a.clamp(-0.5, 0.5),
        "lt": lambda a, b, i, m: a < b,
        "sum": lambda a, b, i, m: a.sum(),
        "mean_dim": lambda a, b, i, m: a.mean(1),
        "max_dim": lambda a, b, i, m: a.max(1),
        "argmax": lambda a, b, i, m: a.argmax(1),
        "var": lambda a, b, i, m: a.var(0),
        "norm": lambda a, b, i, m: a.norm(),
        "mm": lambda a, b, i, m: a @ b.t(),
        "bmm": lambda a, b, i, m: torch.bmm(a[None], b.t()[None]),
        "addmm": lambda a, b, i, m: torch.addmm(a[:, 0], a, b.t()),
        "linear": lambda a, b, i, m: F.linear(a, b),
        "index_select": lambda a, b, i, m: a.index_select(0, i % a.shape[0]),
        "gather": lambda a, b, i, m: a.gather(1, (i % a.shape[1])[: a.shape[0], None]),
        "getitem": lambda a, b, i, m: a[i % a.shape[0]],
        "masked_fill": lambda a, b, i, m: a.masked_fill(m, -1.0),
        "index_add": lambda a, b, i, m: a.index_add(0, i[:3] % a.shape[0], a[:3]),
        "embedding": lambda a, b, i, m: F.embedding(i % a.shape[0], a),
        "transpose": lambda a, b, i, m: a.t().contiguous(),
        "reshape": lambda a, b, i, m: a.t().reshape(-1),
        "flip": lambda a, b, i, m: a.flip(0),
        "cat": lambda a, b, i, m: torch.cat([a, b]),
        "stack": lambda a, b, i, m: torch.stack([a, b]),
        "to_bf16": lambda a, b, i, m: a.to(torch.bfloat16),
        "to_long": lambda a, b, i, m: (a * 10).long(),
        "softmax": lambda a, b, i, m: a.softmax(-1),
        "layer_norm": lambda a, b, i, m: F.layer_norm(a, a.shape[-1:]),
        "conv1d": lambda a, b, i, m: F.conv1d(a.t()[None], b[:4, :, None]),
        "topk": lambda a, b, i, m: a.topk(2, dim=1),
        "sort": lambda a, b, i, m: a.sort(1),
        "tril": lambda a, b, i, m: a.tril(),
        "pad": lambda a, b, i, m: F.pad(a, (1, 1)),
        "repeat": lambda a, b, i, m: a.repeat(2, 1),
        "abs_out": lambda a, b, i, m: torch.abs(a, out=torch.empty(0, device=a.device)),
    }


@pytest.mark.filterwarnings("ignore::neuron_profiler.emulator.modelled.ModelledValueWarning")
@pytest.mark.parametrize("rows", [4, 512])
def test_op_families_are_cpu_values_or_zeros_never_uninitialised(rows: int) -> None:
    """Pointwise, reductions, matmuls, indexing, views, cat/stack, casts: 4x6 inputs are
    computed (CPU's values), 512x512 float inputs modelled (zeros), the same in two runs."""
    g = torch.Generator().manual_seed(0)
    cols = 6 if rows == 4 else 512
    a, b = torch.randn(rows, cols, generator=g), torch.randn(rows, cols, generator=g)
    i = torch.randint(0, 50, (2 * rows,), generator=g)
    m = torch.rand(rows, cols, generator=g) > 0.5
    for name, fn in _families().items():
        want = fn(a, b, i, m)
        runs = [fn(a.to("neuron"), b.to("neuron"), i.to("neuron"), m.to("neuron")) for _ in "12"]
        leaves = zip(*[x if isinstance(x, tuple) else (x,) for x in (want, *runs)], strict=True)
        for w, first, second in leaves:
            assert (first.shape, first.dtype, first.stride()) == (w.shape, w.dtype, w.stride())
            host = first.cpu()
            assert torch.equal(host, second.cpu()), name
            assert torch.equal(host, w if rows == 4 else torch.zeros_like(w)), name


# -- what the profile shows --------------------------------------------------------------------
def _kernels(fn: Any) -> list[dict[str, Any]]:
    rt = get_runtime()
    rt.sys_trace_start()
    fn()
    torch.neuron.synchronize()
    rt.sys_trace_stop()
    events = json.loads(rt.sys_trace_fetch())["events"]
    stops = {e["tracking_id"]: e for e in events if e["phase"] == "stop"}
    rows = []
    kinds = ("nc_exec_running", "nrt_model_submit", RF.EXT_EMULATOR_OVERHEAD)
    for e in events:
        if e["phase"] == "start" and e["event_type"] in kinds:
            rows.append(
                {
                    "type": e["event_type"],
                    "start": e["timestamp_ns"],
                    "stop": stops[e["tracking_id"]]["timestamp_ns"],
                    "dur": stops[e["tracking_id"]]["timestamp_ns"] - e["timestamp_ns"],
                    **e["data"]["neuron_profiler"],
                }
            )
    return rows


def _is_math(row: dict[str, Any]) -> bool:
    """An op's real math, not the emulator's dispatch (host_cost.py: its own overhead spans)."""
    return row[RF.X_OVERHEAD] == RF.OVERHEAD_NUMERICS


def _small_program() -> None:
    x = torch.randn(32, 32).to("neuron")
    ids = torch.arange(32, device="neuron")
    ((x @ x).softmax(-1)[ids % 7] * 2).sum(0).argmax().item()


@pytest.mark.filterwarnings("ignore::neuron_profiler.emulator.modelled.ModelledValueWarning")
def test_device_time_is_the_cost_models_whether_computed_or_not(monkeypatch) -> None:
    computed = _kernels(_small_program)
    monkeypatch.setattr(outputs, "REAL_MAX_ELEMENTS", -1)
    monkeypatch.setattr(outputs, "REAL_MAX_INDEX_ELEMENTS", -1)
    monkeypatch.setattr(outputs, "_PLANS", {})
    emu.enable(cores=1, numerics=False)
    modelled = _kernels(_small_program)
    key = ("op", "dur", "flops", "bytes", "dtype", "engine")
    device = [
        [tuple(r[k] for k in key) for r in rows if r["type"] == "nc_exec_running"]
        for rows in (computed, modelled)
    ]
    assert device[0] == device[1]
    assert len(device[0]) >= 6
    # the small ops' host math is emulator overhead, as in numerics mode, right before the
    # launch (which starts where the math ends); modelled ops have none
    math = [r for r in computed if r["type"] == RF.EXT_EMULATOR_OVERHEAD and _is_math(r)]
    assert {"aten::mm", "aten::_softmax", "aten::argmax"} <= {r["op"] for r in math}
    launches = {(r["op"], r["start"]) for r in computed if r["type"] == "nrt_model_submit"}
    assert all((r["op"], r["stop"]) in launches for r in math), (math, launches)
    assert not [r for r in modelled if r["type"] == RF.EXT_EMULATOR_OVERHEAD and _is_math(r)]


def test_large_work_stays_modelled_next_to_small_real_math() -> None:
    """A 4096x4096 matmul in the same program as small index math: no overhead span for it."""
    big = torch.ones(4096, 4096).to("neuron")

    def step() -> None:
        n = torch.arange(8, device="neuron").sum()
        (big @ big)[: int(n.item())].sum()

    rows = _kernels(step)
    math = {r["op"] for r in rows if r["type"] == RF.EXT_EMULATOR_OVERHEAD and _is_math(r)}
    assert "aten::arange" in math and "aten::sum" in math
    assert "aten::mm" not in math


# -- reading modelled values ---------------------------------------------------------------------
def _modelled_warnings(fn: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, ModelledValueWarning)]


def test_reading_modelled_values_warns_once_naming_the_op() -> None:
    big = torch.ones(512, 512).to("neuron")
    loss = (big @ big).mean()  # mm modelled; the mean of its zeros, computed or not, is zeros
    first = _modelled_warnings(lambda: loss.item())
    assert len(first) == 1
    assert first[0].startswith("value of aten::mm was not computed in timing mode (modelled")
    assert ".item()" in first[0]
    assert _modelled_warnings(lambda: [(big @ big).sum().item() for _ in range(3)]) == []
    # another modelled op, read by a data-dependent op and by a copy to the host
    grown = big.exp()
    (msg,) = _modelled_warnings(lambda: torch.nonzero(grown[0, :8] > 0))
    assert "aten::exp" in msg and "aten::nonzero reads it" in msg
    assert _modelled_warnings(lambda: grown.cpu()) == []  # once per op


@pytest.mark.filterwarnings("ignore::neuron_profiler.emulator.modelled.ModelledValueWarning")
def test_a_loop_waiting_on_modelled_values_stops_with_an_error(monkeypatch) -> None:  # noqa: ANN001
    """A loop whose exit depends on modelled zeros would never end: past the read limit the
    next read raises, naming the op first read and the program's line; enable() counts anew."""
    from neuron_profiler.emulator.modelled import ENV_READ_LIMIT, ModelledValueError

    monkeypatch.setenv(ENV_READ_LIMIT, "50")
    big = torch.ones(512, 512).to("neuron")
    done = (big @ big).mean()  # modelled: stays 0.0, the loop waits for 1.0
    reads = 0
    with pytest.raises(ModelledValueError) as err:
        while done.item() != 1.0:
            reads += 1
            assert reads <= 50, "the guard did not stop the loop"
    assert reads == 50  # the 51st read raised
    text = str(err.value)
    assert "51 times" in text and "aten::mm read by" in text and ENV_READ_LIMIT in text
    assert f"{Path(__file__).name}:" in text  # where the program read it first
    emu.enable(cores=1, numerics=False)  # counts from zero again
    assert [done.item() for _ in range(50)] == [0.0] * 50
    monkeypatch.setenv(ENV_READ_LIMIT, "0")  # no limit
    assert sum(done.item() for _ in range(200)) == 0.0


def test_computed_values_and_fresh_host_data_do_not_warn() -> None:
    small = torch.randn(8, 8).to("neuron")
    big = torch.ones(512, 512).to("neuron")
    modelled = big * 2

    def reads() -> None:
        assert (small @ small).sum().item() == pytest.approx((small.cpu() @ small.cpu()).sum())
        big.sum(0)[:4].cpu()  # modelled sum of real data: zeros, but derived from host data
        modelled.copy_(torch.ones(512, 512))  # overwritten from the host: real again
        modelled[:2, :2].cpu()
        big.new_zeros(300_000).cpu()  # zeros by definition
        torch.zeros_like(big).cpu()

    (msg,) = _modelled_warnings(reads)  # only the modelled sum of real data
    assert msg.startswith("value of aten::sum was not computed")


def test_op_failing_on_modelled_zeros_is_modelled_with_a_warning() -> None:
    logits = torch.ones(2, 512).to("neuron") @ torch.ones(512, 512).to("neuron")
    probs = logits[:, :4]  # a view of modelled zeros: multinomial of them fails on the host

    def sample() -> None:
        tokens = torch.multinomial(probs, 1)
        assert tokens.shape == (2, 1) and tokens.cpu().tolist() == [[0], [0]]

    (msg,) = _modelled_warnings(sample)
    assert "aten::mm" in msg and "aten::multinomial (which fails on zeros" in msg


# -- generate() ----------------------------------------------------------------------------------
GENERATE_RUNS = {"tiny": 7, "wide": 9}  # config -> new tokens


@pytest.fixture(scope="module")
def generated() -> dict[str, dict[str, Any]]:
    """generate() of every config in one subprocess (a hang fails the tests at the timeout
    instead of hanging them; one process: importing transformers is most of a run's time)."""
    pytest.importorskip("transformers")
    pairs = [str(x) for item in GENERATE_RUNS.items() for x in item]
    proc = subprocess.run(
        [sys.executable, str(TESTS / "generate_timing_mode.py"), *pairs],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-len(GENERATE_RUNS) :]
    return {config: json.loads(line) for config, line in zip(GENERATE_RUNS, lines, strict=True)}


def test_generate_small_model_computes_everything_and_equals_cpu(
    generated: dict[str, dict[str, Any]],
) -> None:
    new = GENERATE_RUNS["tiny"]
    result = generated["tiny"]
    for mode in ("greedy", "sample", "beam"):
        r = result[mode]
        assert r["shape"] == [2, 6 + new], (mode, r)
        assert r["equal_cpu"] and r["prompt_kept"], (mode, r)
        assert r["modelled_warnings"] == [], (mode, r)


def test_generate_with_modelled_logits_stops_after_max_new_tokens_and_says_why(
    generated: dict[str, dict[str, Any]],
) -> None:
    new = GENERATE_RUNS["wide"]
    result = generated["wide"]
    for mode in ("greedy", "sample", "beam"):
        r = result[mode]
        assert r["shape"] == [2, 6 + new], (mode, r)
        assert r["prompt_kept"], (mode, r)
    assert result["greedy"]["new_token_values"] == [0]  # argmax of modelled (zero) logits
    said = [m for r in result.values() for m in r["modelled_warnings"]]
    assert len(said) == 1, said  # once, naming the modelled op the EOS check reads
    assert said[0].startswith("value of aten::embedding was not computed in timing mode")
