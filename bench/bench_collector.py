"""Collector costs, each side by side with its baseline in one run:

    python bench/bench_collector.py                    # full size (1M events)
    python bench/bench_collector.py --events 200000 --steps 20   # quicker

1. Training-step time on the emulated device under ``profile([CPU, NEURON])`` vs
   ``profile([CPU])`` (same loop, blocks interleaved); target: plugin cost <= 5%. The session's
   stop-time work (fetch, parse, link, convert) is reported apart, per profiled step.
2. The C++ conversion of a record buffer of N synthetic device events into Kineto activities;
   target >= 2M events/s. Rendering their args (what export costs) is reported apart.
3. The Python parse (runtime_trace.parser, the runtime-trace helper's) of N system-trace JSON
   records into paired activities; target >= 0.5M activities/s. The collector's own
   build_session_result on the same payload is reported apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from neuron_profiler import emulator

emulator.enable(cores=2, chip="trn2")  # before the collector names the PrivateUse1 backend

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from neuron_profiler.collectors import NEURON  # noqa: E402
from neuron_profiler.collectors import session as S  # noqa: E402
from neuron_profiler.collectors._build import load_bridge, load_testing_bridge  # noqa: E402
from neuron_profiler.runtime_trace.parser import parse_system_trace  # noqa: E402


def _train_step_factory():
    dev = torch.device("neuron")
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(64, 256, device=dev), torch.randint(0, 10, (64,), device=dev)

    def step() -> float:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _profiled_block(step, acts: list, steps: int) -> tuple[float, float, float]:
    """Mean wall and CPU time per step inside one profile(acts) block, and stop time per step.

    CPU time (this process) is reported too: on a shared machine it is far less noisy than
    wall time, and the plugin's cost is host CPU work."""
    prof = profile(activities=acts)
    prof.start()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
    t1 = time.perf_counter()
    prof.stop()
    return wall, cpu, (time.perf_counter() - t1) / steps


class _BridgeOnlySource:
    """Installs the correlation provider but leaves the emulated runtime's capture off: what the
    bridge itself costs (Kineto push/pop into the session, session start/stop), without the
    runtime recording events (that is the runtime's trace cost, as it would be libnrt's)."""

    name, links_by_correlation = "bridge-only", True

    def start(self, max_events_per_nc: int, correlation) -> None:
        from neuron_profiler.emulator import runtime

        runtime.set_correlation_provider(correlation)

    def stop(self) -> bytes:
        from neuron_profiler.emulator import runtime

        runtime.set_correlation_provider(None)
        return b'{"events": [], "data_version": 2}'

    def device_properties(self) -> list[dict]:
        return []


def bench_step_time(steps: int, rounds: int) -> dict[str, float]:
    """Blocks of [CPU], [CPU, NEURON] and [CPU, NEURON] with runtime capture off alternate
    (order rotated each round, after discarded warm-up rounds) so that machine drift hits all;
    each cost is the median of the per-round ratios to [CPU]."""
    from neuron_profiler import collectors

    step = _train_step_factory()
    cpu, neuron = [ProfilerActivity.CPU], [ProfilerActivity.CPU, NEURON]
    configs = {
        "cpu": (cpu, None),
        "neuron": (neuron, None),
        "bridge": (neuron, _BridgeOnlySource()),
    }

    def block(name: str, n: int) -> tuple[float, float, float]:
        acts, source = configs[name]
        collectors.set_source(source)
        try:
            return _profiled_block(step, acts, n)
        finally:
            collectors.set_source(None)

    for _ in range(3):  # warm-up: first profiles and first steps are far slower
        for name in configs:
            block(name, 5)
    wall: dict[str, list[float]] = {k: [] for k in configs}
    cpu_time: dict[str, list[float]] = {k: [] for k in configs}
    stop_t: list[float] = []
    names = list(configs)
    for r in range(rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            w, c, st = block(name, steps)
            wall[name].append(w)
            cpu_time[name].append(c)
            if name == "neuron":
                stop_t.append(st)

    def cost(series: dict[str, list[float]], name: str) -> float:
        return (
            statistics.median(a / b for a, b in zip(series[name], series["cpu"], strict=True)) - 1.0
        )

    return {
        "step_ms_cpu": statistics.median(wall["cpu"]) * 1e3,
        "step_ms_cpu_neuron": statistics.median(wall["neuron"]) * 1e3,
        "plugin_cost": cost(wall, "neuron"),
        "plugin_cost_cpu_time": cost(cpu_time, "neuron"),
        "bridge_cost": cost(wall, "bridge"),
        "bridge_cost_cpu_time": cost(cpu_time, "bridge"),
        "stop_ms_per_step": statistics.median(stop_t) * 1e3,
    }


def bench_provider_ns(calls: int = 200_000) -> float:
    """ns per call of the correlation provider the emulator calls at each op launch."""
    fn = load_bridge().current_correlation_id
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def synthetic_records(n: int) -> dict:
    """A record buffer of n device kernels (the shape session.py hands the bridge)."""
    rng = np.random.default_rng(0)
    rows = np.zeros(n, dtype=S.RECORD)
    rows["start_ns"] = np.cumsum(rng.integers(500, 5000, n)) + 1_700_000_000_000_000_000
    rows["end_ns"] = rows["start_ns"] + rng.integers(100, 4000, n)
    rows["flops"], rows["bytes"] = rng.integers(1, 1 << 30, n), rng.integers(1, 1 << 24, n)
    rows["exec_id"] = rows["activity"] = np.arange(n)
    rows["device"] = rows["pid"] = np.arange(n) % 2
    rows["stream"] = (np.arange(n) % 2) * 4 + 1
    rows["correlation"] = np.arange(n) + (1 << 30)
    rows["kineto_type"] = S.KINETO_KERNEL
    rows["tid"] = 7
    rows["external_id"] = rows["flow_id"] = np.arange(n) + 1
    rows["name_id"] = rows["args_id"] = np.arange(n) % 4
    names = ["TensorE: mm", "TensorE: addmm", "ScalarE: relu", "VectorE: _foreach_add_"]
    args = [[("emulated", "true"), ("op", json.dumps(nm))] for nm in names]
    return {"rows": rows, "names": names, "args": args}


def bench_convert(n: int) -> dict[str, float]:
    bridge = load_testing_bridge()
    rec = synthetic_records(n)
    secs, count, _ = bridge.convert_records(rec, False)
    assert count == n
    return {
        "convert_events_per_s": n / secs,
        "render_args_events_per_s": n / bridge.render_seconds(rec),
    }


def synthetic_payload(records: int) -> bytes:
    """records system-trace events: start/stop pairs of kernels with our extension fields."""
    events = []
    t = 1_700_000_000_000_000_000
    for i in range(records // 2):
        ext = {
            "op": "aten::mm",
            "flops": 1000 + i,
            "bytes": 4096,
            "queue": "compute",
            "correlation_id": i + 1,
            "launch_ns": t,
            "modelled": True,
        }
        base = {"event_type": "nc_exec_running", "tracking_id": i, "nc_idx": i % 2, "thread_id": 7}
        events.append(
            {
                **base,
                "phase": "start",
                "timestamp_ns": t + 10,
                "data": {"exec_id": i, "neuron_profiler": ext},
            }
        )
        events.append({**base, "phase": "stop", "timestamp_ns": t + 900, "data": {"exec_id": i}})
        t += 1000
    return json.dumps({"events": events, "data_version": 2}).encode()


def bench_parse(records: int) -> dict[str, float]:
    payload = synthetic_payload(records)
    t0 = time.perf_counter()
    acts = parse_system_trace(payload)
    parse_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = S.build_from_activities(
        acts, window=(0, 2**62), intervals=S.Intervals.empty(), host_pid=1, props=[]
    )
    build_s = time.perf_counter() - t1
    assert len(acts) == records // 2 == len(res.records)
    return {
        "parse_activities_per_s": len(acts) / parse_s,
        "session_build_activities_per_s": len(acts) / build_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument(
        "--rounds",
        type=int,
        default=60,
        help="interleaved blocks per configuration (the cost is a median of ratios)",
    )
    a = ap.parse_args()
    st = bench_step_time(a.steps, a.rounds)
    print(
        f"step time   [CPU] {st['step_ms_cpu']:.3f} ms  [CPU, NEURON] "
        f"{st['step_ms_cpu_neuron']:.3f} ms (wall, medians) -> [CPU, NEURON] costs "
        f"{st['plugin_cost'] * 100:+.1f}% wall, {st['plugin_cost_cpu_time'] * 100:+.1f}% "
        f"process CPU time (target: the plugin's own cost <= 5%); stop-time work "
        f"{st['stop_ms_per_step']:.3f} ms per profiled step"
    )
    print(
        f"  of which the bridge alone (runtime capture off): {st['bridge_cost'] * 100:+.1f}% "
        f"wall, {st['bridge_cost_cpu_time'] * 100:+.1f}% CPU time; the rest is the emulated "
        f"runtime recording its events; correlation provider {bench_provider_ns():.0f} ns/call"
    )
    cv = bench_convert(a.events)
    print(
        f"C++ convert {a.events} events: {cv['convert_events_per_s'] / 1e6:.2f} M events/s "
        f"= {cv['convert_events_per_s'] / 2e6:.2f}x the 2M/s target; args rendering "
        f"{cv['render_args_events_per_s'] / 1e6:.2f} M events/s"
    )
    ps = bench_parse(a.events)
    print(
        f"parse {a.events} records: {ps['parse_activities_per_s'] / 1e6:.2f} M activities/s "
        f"= {ps['parse_activities_per_s'] / 0.5e6:.2f}x the 0.5M/s target; session build "
        f"(link, window, layout) {ps['session_build_activities_per_s'] / 1e6:.2f} M "
        f"activities/s"
    )


if __name__ == "__main__":
    main()
