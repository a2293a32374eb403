"""The emulated neuron device: registration, torch.neuron, factories, copies, host waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.costmodel.chips import chip  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)
    yield
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    emu.enable(cores=2, chip="trn2", speed_factor=1.0)


def _capture(fn):
    rt = get_runtime()
    rt.sys_trace_start()
    try:
        fn()
    finally:
        rt.sys_trace_stop()
    return json.loads(rt.sys_trace_fetch())["events"]


def test_torch_neuron_module_and_factories_match_cpu() -> None:
    assert torch.neuron.is_available() and torch.neuron.device_count() == 2
    assert torch.get_device_module("neuron") is torch.neuron
    torch.manual_seed(3)
    on_device = torch.randn(4, 5, device="neuron")
    torch.manual_seed(3)
    on_cpu = torch.randn(4, 5)
    assert on_device.device == torch.device("neuron", 0)
    assert torch.equal(on_device.cpu(), on_cpu)
    assert torch.equal(torch.arange(6, device="neuron").cpu(), torch.arange(6))
    assert torch.equal(torch.full((2, 2), 7.0, device="neuron:1").cpu(), torch.full((2, 2), 7.0))
    scalar = torch.tensor(3.5, device="neuron")
    assert scalar.item() == 3.5 and scalar.device.type == "neuron"
    assert torch.zeros(3, device="neuron:1").device.index == 1


def test_seeding_through_the_device_api_makes_device_draws_reproducible() -> None:
    """GPU-style code seeds with torch.cuda.manual_seed -> torch.neuron.manual_seed: the same
    seed gives the same draws, equal to CPU's for that seed."""
    torch.neuron.manual_seed(11)
    first = torch.rand(3, device="neuron").cpu()
    torch.neuron.manual_seed_all(11)
    again = torch.rand(3, device="neuron").cpu()
    torch.manual_seed(11)
    assert torch.equal(first, again) and torch.equal(first, torch.rand(3))
    assert torch.initial_seed() == 11


def _native_hooks() -> bool:
    from neuron_profiler.emulator import native

    return native.loaded() is not None


@pytest.mark.parametrize("numerics", [True, False])
def test_device_generators_draw_reproducibly_like_cuda_generators(numerics: bool) -> None:
    """``torch.Generator(device="neuron")`` seeds and advances as a CUDA generator does: the
    same seed gives the same draws (equal to a CPU generator's for that seed), its state
    advances with each draw and ``get_state`` / ``set_state`` replay them; a host op refuses it
    as a host op refuses a CUDA generator. Timing mode computes these small draws too."""
    if not _native_hooks():
        pytest.skip("needs the memory extension's PrivateUse1 hooks (a C++ compiler)")
    emu.enable(cores=2, numerics=numerics)
    g = torch.Generator(device="neuron")
    assert g.device.type == "neuron" and torch.Generator(device="neuron:1").device.index == 1
    ref = torch.Generator().manual_seed(5)
    g.manual_seed(5)
    assert g.initial_seed() == 5
    expected = [torch.randn(4, generator=ref), torch.rand(2, 3, generator=ref)]
    state = g.get_state()
    got = [
        torch.randn(4, device="neuron", generator=g),
        torch.rand(2, 3, device="neuron:1", generator=g),
    ]
    assert [str(t.device) for t in got] == ["neuron:0", "neuron:1"]
    assert all(torch.equal(a.cpu(), b) for a, b in zip(got, expected, strict=True))
    g.set_state(state)
    assert torch.equal(torch.randn(4, device="neuron", generator=g).cpu(), expected[0])
    g.manual_seed(9)
    ref.manual_seed(9)
    x = torch.empty(6, device="neuron").normal_(generator=g)
    perm = torch.randperm(8, device="neuron", generator=g)
    picks = torch.multinomial(torch.ones(8, device="neuron"), 3, generator=g)
    assert torch.equal(x.cpu(), torch.empty(6).normal_(generator=ref))
    assert torch.equal(perm.cpu(), torch.randperm(8, generator=ref))
    assert torch.equal(picks.cpu(), torch.multinomial(torch.ones(8), 3, generator=ref))
    torch.manual_seed(0)  # the default generator is another one: no effect on g
    assert torch.equal(
        torch.rand(3, device="neuron", generator=g).cpu(), torch.rand(3, generator=ref)
    )
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator"):
        torch.randn(3, generator=g)
    # CUDA's random kernels check a generator's device type only (ATen's check_generator), so
    # a generator of one CUDA device draws for another's tensors: so does one of core 0 here
    g0 = torch.Generator(device="neuron:0").manual_seed(7)
    ref.manual_seed(7)
    on_core1 = torch.randn(3, device="neuron:1", generator=g0)
    assert on_core1.device.index == 1 and torch.equal(on_core1.cpu(), torch.randn(3, generator=ref))


def test_to_cpu_item_and_mixed_devices() -> None:
    x = torch.randn(3, 4)
    d = x.to("neuron")
    assert torch.equal(d.cpu(), x) and not isinstance(d.cpu(), type(d))
    assert (d * 2).sum().item() == pytest.approx((x * 2).sum().item())
    moved = d.to("neuron:1")
    assert moved.device.index == 1 and torch.equal(moved.cpu(), x)
    with pytest.raises(RuntimeError, match="same device"):
        _ = d + moved
    with pytest.raises(RuntimeError, match="not an emulated device"):
        torch.ones(2, device="neuron:7")
    assert (d + torch.tensor(1.0)).device.type == "neuron"  # 0-dim host scalar is fine


def test_copies_are_dma_events_with_bytes_and_direction() -> None:
    x = torch.randn(1000)  # 4000 bytes of float32

    def work() -> None:
        d = x.to("neuron")
        e = d.to("neuron:1")
        e.cpu()

    events = _capture(work)
    starts = [e for e in events if e["phase"] == F.START]
    by_type = {
        t: [e for e in starts if e["event_type"] == t]
        for t in (F.DMEM_BUF_COPYIN, F.EXT_DMA_D2D, F.DMEM_BUF_COPYOUT)
    }
    for event_type, direction, core in (
        (F.DMEM_BUF_COPYIN, F.H2D, 0),
        (F.EXT_DMA_D2D, F.D2D, 1),
        (F.DMEM_BUF_COPYOUT, F.D2H, 1),
    ):
        (ev,) = by_type[event_type]
        ext = ev["data"][F.EXT_KEY]
        assert ext[F.X_BYTES] == 4000 and ext[F.X_DIRECTION] == direction
        assert ext[F.X_QUEUE] == F.QUEUE_DMA and ev["nc_idx"] == core and ext[F.X_MODELLED]
    syncs = [e for e in starts if e["event_type"] == F.EXT_HOST_SYNC]
    assert [s["data"][F.EXT_KEY][F.X_SYNC_REASON] for s in syncs] == ["cpu"]


def test_host_really_waits_for_modelled_device_time() -> None:
    speed = 1e-5  # device time (~180 ms) dominates the host's own matmul by far
    emu.enable(cores=2, chip="trn2", speed_factor=speed)
    n = 256
    a = torch.randn(n, n, device="neuron")
    torch.neuron.synchronize()
    spec = chip("trn2")
    # fp32 matmul: 2n^3 flops at the fp32 matrix rate of one logical core, plus the fixed cost
    kernel_s = (
        2 * n**3 / (spec.bf16_tflops * 1e12 / spec.logical_cores * 0.25)
        + spec.kernel_fixed_ns * 1e-9
    ) / speed
    launch = time.perf_counter()
    b = a @ a
    returned = time.perf_counter()
    torch.neuron.synchronize()
    synced = time.perf_counter()
    assert synced - launch >= kernel_s  # the host waited for the device
    assert returned - launch < kernel_s  # but the launch itself was asynchronous
    assert b.device.type == "neuron"


def test_device_durations_are_deterministic() -> None:
    def program() -> None:
        a = torch.randn(64, 64, device="neuron")
        for _ in range(3):
            a = torch.relu(a @ a) + 1
        a.sum().item()

    def durations(events: list[dict]) -> list[tuple[str, int]]:
        opened, out = {}, []
        for e in events:
            if e["event_type"] in (F.NC_EXEC_RUNNING, F.DMEM_BUF_COPYOUT):
                key = e["tracking_id"]
                if e["phase"] == F.START:
                    opened[key] = e
                else:
                    start = opened.pop(key)
                    out.append(
                        (
                            start["data"][F.EXT_KEY][F.X_OP],
                            e["timestamp_ns"] - start["timestamp_ns"],
                        )
                    )
        return out

    first, second = durations(_capture(program)), durations(_capture(program))
    assert len(first) >= 8 and first == second


def test_refuses_when_a_real_neuron_backend_is_registered() -> None:
    code = (
        "import torch, types\n"
        "torch.utils.rename_privateuse1_backend('neuron')\n"
        "torch._register_device_module('neuron', types.ModuleType('torch_neuronx_like'))\n"
        "import neuron_profiler.emulator as emu\n"
        "from neuron_profiler.errors import EmulatorError\n"
        "try:\n    emu.enable()\nexcept EmulatorError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != emu.ENV_EMULATE}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    assert "refused:" in out.stdout and "real 'neuron' backend" in out.stdout


def test_enable_after_a_backward_pass_is_refused_with_the_fix() -> None:
    """Autograd sizes its device queues at the first backward: enabled afterwards, the device's
    first backward failed deep in engine.cpp. enable() now says why and what to do; enabled
    first, the same backward runs."""
    backward = "a = torch.ones(2, requires_grad=True); (a * 2).sum().backward()\n"
    device_backward = (
        "b = torch.ones(2, device='neuron', requires_grad=True)\n"
        "(b * 3).sum().backward(); print('grad', b.grad.cpu().tolist())\n"
    )
    late = (
        "import torch\n" + backward + "import neuron_profiler.emulator as emu\n"
        "from neuron_profiler.errors import EmulatorError\n"
        "try:\n    emu.enable(cores=1)\nexcept EmulatorError as e:\n    print('refused:', e)\n"
    )
    early = "import torch\nimport neuron_profiler.emulator as emu\nemu.enable(cores=1)\n"
    env = {k: v for k, v in os.environ.items() if k != emu.ENV_EMULATE}
    run = [sys.executable, "-c", late + "\n" + "print('done')"]
    refused = subprocess.run(run, capture_output=True, text=True, check=True, env=env, timeout=120)
    assert "refused:" in refused.stdout and "before any backward pass" in refused.stdout
    run = [sys.executable, "-c", early + backward + device_backward]
    fine = subprocess.run(run, capture_output=True, text=True, check=True, env=env, timeout=120)
    assert "grad [3.0, 3.0]" in fine.stdout


def test_env_var_enables_at_import() -> None:
    code = (
        "import neuron_profiler.emulator, torch\n"
        "x = torch.ones(3, device='neuron') * 2\n"
        "print(torch.neuron.device_count(), x.cpu().tolist())\n"
    )
    env = dict(os.environ, **{emu.ENV_EMULATE: "1"})
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    assert out.stdout.split("\n")[0] == "2 [2.0, 2.0, 2.0]"


def test_pin_memory_and_dataloader_pinning_work() -> None:
    x = torch.randn(4, 2)
    pinned = x.pin_memory()
    assert torch.equal(pinned, x) and pinned.data_ptr() != x.data_ptr()
    assert pinned.is_pinned() and pinned[1:].t().is_pinned() and not x.is_pinned()
    assert pinned.pin_memory() is pinned  # already pinned: no second copy, as on CUDA
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x), batch_size=2, pin_memory=True
    )
    host = [b for (b,) in loader]
    assert all(b.is_pinned() for b in host)
    batches = [b.to("neuron", non_blocking=True) for b in host]
    assert torch.equal(torch.cat([b.cpu() for b in batches]), x)


def test_pinned_memory_is_forgotten_when_its_storage_is_freed() -> None:
    """The registry holds a pinned storage while any tensor on it lives, then forgets it (an
    address reused by a later allocation is not pinned by mistake)."""
    from neuron_profiler.emulator import pinned as P

    before = set(P._PINNED)
    p = torch.randn(1000).pin_memory()
    view = p[10:]
    address = p.untyped_storage().data_ptr()
    del p
    assert set(P._PINNED) - before == {address} and view.is_pinned()
    del view
    assert set(P._PINNED) == before - {address}


def test_chip_choice_changes_modelled_durations_and_is_labelled() -> None:
    def matmul_ns() -> int:
        a = torch.randn(256, 256, device="neuron", dtype=torch.bfloat16)
        events = _capture(lambda: a @ a)
        spans = {}
        for e in events:
            if e["event_type"] == F.NC_EXEC_RUNNING:
                spans.setdefault(e["tracking_id"], []).append(e["timestamp_ns"])
        (span,) = spans.values()
        return span[1] - span[0]

    durations = {}
    for name in ("trn2", "trn3"):
        emu.enable(cores=2, chip=name)
        spec = chip(name)
        compute_s = 2 * 256**3 / (spec.bf16_tflops * 1e12 / spec.logical_cores)
        memory_s = 3 * 256 * 256 * 2 / (spec.hbm_tbps * 1e12 / spec.logical_cores)  # a, a, out
        expected = max(compute_s, memory_s) + spec.kernel_fixed_ns * 1e-9
        durations[name] = matmul_ns()
        assert durations[name] == pytest.approx(expected * 1e9, abs=1)
        assert json.loads(get_runtime().sys_trace_fetch())["neuron_profiler"]["chip"] == name
    assert durations["trn2"] != durations["trn3"]


def test_events_time_modelled_device_work_like_cuda_events() -> None:
    speed = 1e-4
    emu.enable(cores=2, speed_factor=speed)
    a = torch.randn(128, 128, device="neuron")
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        a = torch.relu(a)
    end.record()
    end.synchronize()
    assert end.query() and torch.neuron.current_stream().query()
    spec = chip("trn2")
    # three bandwidth-bound elementwise kernels: read + write 64 KiB each, plus the fixed cost
    per_kernel_s = (
        max(
            128 * 128 / (spec.vector_gflops_per_core * 1e9),
            2 * 128 * 128 * 4 / (spec.hbm_tbps * 1e12 / spec.logical_cores),
        )
        + spec.kernel_fixed_ns * 1e-9
    )
    # launch latency and host gaps can only add to the span, never shorten it
    assert start.elapsed_time(end) >= 3 * per_kernel_s / speed * 1e3 * 0.999
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.neuron.Event().elapsed_time(end)
    s = torch.neuron.Stream(device="neuron:1")
    with torch.neuron.stream(s):
        assert torch.ones(1, device="neuron").device.index == 1
    assert torch.ones(1, device="neuron").device.index == 0


def test_accepts_the_name_given_by_our_collector() -> None:
    """Getting NEURON names PrivateUse1 "neuron" (no device module): enabling must still work."""
    code = (
        "import torch\n"
        "torch.utils.rename_privateuse1_backend('neuron')\n"
        "import neuron_profiler.emulator as emu\n"
        "emu.enable(cores=1)\n"
        "print('sum', torch.ones(3, device='neuron').sum().item())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != emu.ENV_EMULATE}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    assert "sum 3.0" in out.stdout


def test_side_stream_copies_run_beside_the_default_streams_compute() -> None:
    """A device-to-device copy launched on a side stream (FSDP's all-gather copy-in) goes to
    the DMA queue ordered on that stream only: it ends before a long matmul launched earlier on
    the default stream does. The same copy on the default stream waits for the matmul."""
    emu.enable(cores=1, speed_factor=1e-3)
    a = torch.randn(1024, 1024, device="neuron")  # 2 GFLOP: 50 ms modelled at this speed
    flat = torch.empty(64 * 1024, device="neuron")  # 256 KiB: a fraction of that
    side = torch.neuron.Stream()
    torch.neuron.synchronize()
    ends = {}
    for where in ("side", "default"):
        start = torch.neuron.Event(enable_timing=True)
        start.record()
        product = a @ a  # default stream
        mm_done = torch.neuron.Event(enable_timing=True)
        mm_done.record()
        with torch.neuron.stream(side if where == "side" else torch.neuron.default_stream()):
            torch._foreach_copy_([flat], [a[:64].reshape(-1)])
            copy_done = torch.neuron.Event(enable_timing=True)
            copy_done.record()
        torch.neuron.current_stream().wait_stream(side)
        after = flat + 1  # default stream, after the wait: after the copy
        after_done = torch.neuron.Event(enable_timing=True)
        after_done.record()
        torch.neuron.synchronize()
        ends[where] = [start.elapsed_time(e) for e in (mm_done, copy_done, after_done)]
        assert product.shape == (1024, 1024) and after.shape == (64 * 1024,)
    mm, copy, after = ends["side"]
    assert copy < mm and after >= copy
    mm, copy, _ = ends["default"]
    assert copy > mm
