"""The projection's error on the shared real traces (docs/projection.md, "Error"):

    python bench/projection_error.py [SHARED_TRACES_DIR]

(a) the replay check: each trace with ProfilerSteps replayed on its rebuilt dependencies with its
recorded durations, against its recorded mean step; (b) cross-GPU: ResNet-50 training at batch
32, FP32, recorded on a V100 (kineto's tb_plugin samples, num_workers 0 and 4) and on an A100
(HTA's nccl_parser_config trace, rank 0 of 2), each projected onto the other's chip, compute
time per step against the one measured there, per op class. Nothing here is tuned per trace.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from neuron_profiler.analysis.projection import Projection, project
from neuron_profiler.trace import load_trace

ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
STEPPED = (
    "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/tb_plugin/test/gpu_metrics_input.json",
    "hta/tests/data/nccl_parser_config/nccl_data.json.gz",
    "hta/tests/data/trace_filter/sampled_rank-0.json.gz",
    "hta/tests/data/trace_filter/sampled_rank-1.json.gz",
    "hta/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/tests/data/triton_example/triton_example.json.gz",
    "hta/_history/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
)
V100 = STEPPED[:2]
A100 = STEPPED[3]
# op classes for the cross-GPU table, by the name of the op that launched the kernel
OP_CLASSES = (
    ("convolution", re.compile(r"conv", re.I)),
    ("batch norm", re.compile(r"batch_norm", re.I)),
    ("matmul", re.compile(r"aten::(mm|addmm|linear|matmul|bmm)$")),
    (
        "optimizer (_foreach_, add_/mul_ loops)",
        re.compile(r"_foreach_|aten::(add_|mul_|addcdiv_|addcmul_|sqrt)$"),
    ),
)


def replay_table(root: Path) -> None:
    print("| trace | chip | steps | device items | recorded mean step ms | replayed ms | error |")
    print("|---|---|---|---|---|---|---|")
    for name in STEPPED:
        p = project(load_trace(root / name), "same")
        print(
            f"| {name.split('/')[-2]}/{name.split('/')[-1][:32]} | {p.source.chip} | {p.steps} | "
            f"{p.items} | {p.source.step_ms:.3f} | {p.replay_ms:.3f} | {p.replay_error_pct:+.3f}% |"
        )


def _by_class(p: Projection, side: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for o in p.ops:
        if o.cls in ("copies", "collectives"):
            continue
        cls = next((c for c, rx in OP_CLASSES if rx.search(o.name)), "other compute")
        out[cls] = out.get(cls, 0.0) + (o.source_ms if side == "source" else o.target_ms)
    out["compute (all)"] = next(c for c in p.classes if c.cls == "compute").__getattribute__(
        "source_ms" if side == "source" else "target_ms"
    )
    return out


def cross_table(root: Path) -> None:
    a100 = load_trace(root / A100)
    measured_a100 = _by_class(project(a100, "same", top=None), "source")
    for name in V100:
        v100 = load_trace(root / name)
        forward = _by_class(project(v100, "a100", top=None), "target")
        backward = _by_class(project(a100, "v100", top=None), "target")
        measured_v100 = _by_class(project(v100, "same", top=None), "source")
        print(f"\n{name.split('/')[-2]} (V100) <-> nccl_data (A100), ms per step")
        print(
            "| op class | V100 -> A100 projected | A100 measured | error | A100 -> V100 projected | V100 measured | error |"
        )
        print("|---|---|---|---|---|---|---|")
        for cls in [c for c, _ in OP_CLASSES] + ["other compute", "compute (all)"]:
            f, ma = forward.get(cls, 0.0), measured_a100.get(cls, 0.0)
            b, mv = backward.get(cls, 0.0), measured_v100.get(cls, 0.0)
            print(
                f"| {cls} | {f:.2f} | {ma:.2f} | {_err(f, ma)} | {b:.2f} | {mv:.2f} | {_err(b, mv)} |"
            )


def _err(projected: float, measured: float) -> str:
    return f"{100 * (projected - measured) / measured:+.0f}%" if measured else "-"


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    replay_table(root)
    cross_table(root)
