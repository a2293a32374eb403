"""HTA 0.5.0 reads our traces as it reads CUDA's: collector output on one and two cores, and a
merged trace (the 2-rank DDP case is in test_emulator_ddp.py). See hta_checks.py for what is
compared; docs/collector.md says what HTA's CUDA-specific views return on our traces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("hta")

from hta_checks import check_with_hta  # noqa: E402

from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402
from neuron_profiler.runtime_trace.merge import merge_files  # noqa: E402

SCRIPT = r"""
import sys
from pathlib import Path
import torch
from neuron_profiler import emulator
emulator.enable(cores=2, chip="trn2")
from neuron_profiler import NEURON
from neuron_profiler.emulator.runtime import get_runtime
from torch.profiler import ProfilerActivity, profile, schedule

out = Path(sys.argv[1])
def work(cores):
    for core in cores:
        dev = torch.device(f"neuron:{core}")
        a = torch.randn(512, 512).to(dev)
        for _ in range(4):
            a = torch.relu(a @ a) / 512
        a.sum().item()
        a.cpu()
for name, cores in (("one", [0]), ("two", [0, 1])):
    (out / name).mkdir()
    with profile(activities=[ProfilerActivity.CPU, NEURON],
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p, n=name: p.export_chrome_trace(
                     str(out / n / "trace.json"))) as p:
        for _ in range(3):
            with torch.profiler.record_function("step"):
                work(cores)
            p.step()
rt = get_runtime()
with profile(activities=[ProfilerActivity.CPU]) as p:   # host only; device events captured apart
    rt.sys_trace_start()
    work([0, 1])
    rt.sys_trace_stop()
p.export_chrome_trace(str(out / "host.json"))
(out / "device.json").write_bytes(rt.sys_trace_fetch())
"""


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hta")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = out / "merged"
    merged.mkdir()
    result = merge_files(out / "host.json", [out / "device.json"])
    write_chrome_trace(result.trace, merged / "trace.json")
    return out


@pytest.mark.parametrize("rounded", [True, False], ids=["hta-default", "ns-rounding-off"])
@pytest.mark.parametrize("which", ["one", "two", "merged"])
def test_hta_breakdowns_agree_with_our_device_rows(
    produced: Path, which: str, rounded: bool
) -> None:
    said = check_with_hta(produced / which, rounded=rounded)
    # CUDA-only views, as documented in docs/collector.md: HTA finds launches by CUDA runtime
    # names (no queue-length summary) and communication by NCCL kernel names (no overlap).
    assert said["queue"] is None
    assert said["overlap"]["comp_comm_overlap_pctg"].isna().all()
