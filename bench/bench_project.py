"""Whole-process time and peak memory of ``neuron-prof project --chip trn2 --json`` on a
generated trace (bench/gen_trace.py, the shared A100 trace's shape), side by side with
``neuron-prof analyze --json`` on the same file (the named baseline: the analyzer reads the same
trace model and shared selections)::

    python bench/bench_project.py                 # 1,000,000 events (issue 27's target: <= 20 s)
    python bench/bench_project.py --events 200000 --repeat 3

The trace is generated once and cached under runs/bench/traces/. Each command runs in a fresh
process, timed from start to exit, peak RSS from the kernel (``ru_maxrss`` of the child).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "runs" / "bench" / "traces"
TARGET_S = 20.0  # issue 27, point 7: a 1M-event trace projected in at most 20 s


def trace_of(events: int) -> Path:
    path = TRACES / f"gen_{events}.json"
    if not path.exists():
        TRACES.mkdir(parents=True, exist_ok=True)
        gen = [sys.executable, str(ROOT / "bench" / "gen_trace.py"), str(events), "-o", str(path)]
        subprocess.run(gen, check=True)
    return path


def timed(args: list[str]) -> tuple[float, float]:
    """(seconds, peak MB) of one fresh ``neuron-prof`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "neuron_profiler.cli.main", *args]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    path = str(trace_of(a.events))
    rows = []
    for _ in range(a.repeat):
        project_s, project_mb = timed(["project", path, "--chip", "trn2", "--json"])
        analyze_s, analyze_mb = timed(["analyze", path, "--json"])
        rows.append((project_s, project_mb, analyze_s, analyze_mb))
    best = min(rows)
    p_s, p_mb, a_s, a_mb = best[0], best[1], min(r[2] for r in rows), best[3]
    print(
        f"{a.events:,} events: project {p_s:.1f} s (target {TARGET_S:.0f} s: "
        f"{'PASS' if p_s <= TARGET_S else 'MISS'}), analyze {a_s:.1f} s, "
        f"ratio project/analyze {p_s / a_s:.2f}; peak RSS of the children so far "
        f"{p_mb:.0f} MB / {a_mb:.0f} MB (ru_maxrss is the largest child's)"
    )


if __name__ == "__main__":
    main()
