"""Whole-process analysis time and peak memory: ``neuron-prof analyze --json`` vs HTA 0.5.0's
load + temporal breakdown + idle-time breakdown, side by side, startup included.

    python bench/bench_analyze.py                        # every shared trace HTA can analyse
    python bench/bench_analyze.py --generated 1000000    # plus a generated trace (gen_trace.py)
    python bench/bench_analyze.py --alone 5000000 --repeat 3   # ours only, against the target

``--alone N``: a generated trace of N events analysed by ``neuron-prof`` only, against the
issue's absolute target (5M events in at most 20 s and 2 GB); HTA is not run at that size (at
1M it already takes minutes and 1.3 GB, and it grows with the trace).

Both tools run from byte-compiled sources, as an installed wheel does: HTA's site-packages
were compiled by pip; this package is compiled here first (an editable install under
``PYTHONDONTWRITEBYTECODE`` would otherwise recompile every module in every run, ~35 ms).
Each (tool, file) runs in a fresh process (``--repeat`` times: best time, median peak RSS);
time = wall clock of the process, memory = its peak RSS (``os.wait4``). HTA gets a folder with
only a symlink to the trace (it reads a folder as ranks). Prints a table with the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
HTA = r"""
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=list(ta.t.traces), visualize=False)
"""


def run(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MB, exit status) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def measure(path: Path, repeat: int) -> dict[str, tuple[float, float]] | None:
    folder = Path(tempfile.mkdtemp())
    (folder / path.name).symlink_to(path)
    ours_cmd = [sys.executable, "-m", "neuron_profiler.cli.main", "analyze", "--json", str(path)]
    hta_cmd = [sys.executable, "-c", HTA, str(folder)]
    out = {}
    for tool, cmd in (("ours", ours_cmd), ("hta", hta_cmd)):
        runs = [run(cmd) for _ in range(repeat)]
        if any(code != 0 for _, _, code in runs):
            return None  # HTA cannot analyse it (no kernel): nothing to compare
        out[tool] = (min(t for t, _, _ in runs), statistics.median(m for _, m, _ in runs))
    return out


def generated(n: int) -> Path:
    """A generated trace of n events (made once, kept under runs/bench/traces)."""
    target = REPO / "runs" / "bench" / "traces" / f"gen_{n}.json"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(REPO / "bench" / "gen_trace.py"), str(n), "-o", str(target)],
            check=True,
        )
    return target


TARGET_S, TARGET_MB = 20.0, 2048.0  # the 5M-event target of the analyzer issue


def alone(path: Path, repeat: int) -> None:
    """Ours only, every run listed, against the absolute target."""
    cmd = [sys.executable, "-m", "neuron_profiler.cli.main", "analyze", "--json", str(path)]
    runs = [run(cmd) for _ in range(repeat)]
    if any(code != 0 for _, _, code in runs):
        raise SystemExit(f"{path}: neuron-prof analyze failed")
    times = ", ".join(f"{t:.2f}" for t, _, _ in runs)
    peak = max(m for _, m, _ in runs)
    print(
        f"{path.name}: {times} s (target {TARGET_S:.0f} s), peak RSS {peak:.0f} MB "
        f"(target {TARGET_MB:.0f} MB): time {max(t for t, _, _ in runs) / TARGET_S:.2f} "
        f"of the target, memory {peak / TARGET_MB:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--generated", type=int, nargs="*", default=[])
    ap.add_argument("--alone", type=int, nargs="*", default=[])
    args = ap.parse_args()
    import compileall

    compileall.compile_dir(str(REPO / "neuron_profiler"), quiet=1)
    if args.alone:
        for n in args.alone:
            alone(generated(n), args.repeat)
        return
    files = sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")))
    files += [generated(n) for n in args.generated]
    print(
        f"{'trace':<48} {'ours s':>7} {'HTA s':>7} {'x faster':>8} {'ours MB':>8} "
        f"{'HTA MB':>8} {'mem ratio':>9}"
    )
    for path in files:
        m = measure(path, args.repeat)
        if m is None:
            print(f"{path.name[:48]:<48} HTA cannot analyse it (no kernel)")
            continue
        (ot, om), (ht, hm) = m["ours"], m["hta"]
        print(
            f"{path.name[:48]:<48} {ot:7.2f} {ht:7.2f} {ht / ot:8.1f} {om:8.0f} {hm:8.0f} "
            f"{om / hm:9.2f}"
        )


if __name__ == "__main__":
    main()
