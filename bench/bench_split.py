"""The split load against the whole load, side by side in one run (docs/trace-model.md).

    python bench/bench_split.py FILE [FILE ...] --repeat 5

For each plain trace file, fresh processes run interleaved, the split off
(``NEURON_PROFILER_SPLIT_LOAD=0``, the baseline) and at its default: ``load_trace`` alone
(imports excluded, timed inside the process) and the whole ``neuron-prof analyze --json``
process (``bench_analyze.run``: wall time, peak memory as the process group's summed PSS, so
the child counts). Prints best and median seconds, peak MB and the ratios whole/split.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import ours_cmd, run  # noqa: E402

SIDES = {"whole": "0", "split": ""}  # NEURON_PROFILER_SPLIT_LOAD: "0" off, "" the default
_LOAD = r"""
import json, sys, time
from neuron_profiler.trace import load_trace
t0 = time.perf_counter()
trace = load_trace(sys.argv[1])
print(json.dumps({"s": time.perf_counter() - t0, "rows": len(trace)}))
"""


def _env_cmd(setting: str, cmd: list[str]) -> list[str]:
    return ["/usr/bin/env", f"NEURON_PROFILER_SPLIT_LOAD={setting}", *cmd]


def _load_seconds(setting: str, path: Path) -> float:
    env = dict(os.environ, NEURON_PROFILER_SPLIT_LOAD=setting)
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"{path}: load failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)["s"]


def bench(path: Path, repeat: int) -> dict:
    loads: dict[str, list[float]] = {side: [] for side in SIDES}
    whole: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    for _ in range(repeat):
        for side, setting in SIDES.items():
            loads[side].append(_load_seconds(setting, path))
            r = run(_env_cmd(setting, ours_cmd(path)))
            if r.error:
                raise SystemExit(f"{path}: analyze failed: {r.error}")
            whole[side].append((r.seconds, r.mb))
    row = {}
    for side in SIDES:
        secs = [s for s, _ in whole[side]]
        row[side] = {
            "load_best": min(loads[side]),
            "load_median": statistics.median(loads[side]),
            "analyze_best": min(secs),
            "analyze_median": statistics.median(secs),
            "peak_mb": statistics.median(mb for _, mb in whole[side]),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    print(
        f"{'trace':30} {'side':6} {'load best':>9} {'median':>7} {'analyze best':>12} "
        f"{'median':>7} {'peak MB':>8}"
    )
    for path in args.files:
        row = bench(path, args.repeat)
        for side, r in row.items():
            print(
                f"{path.name[:30]:30} {side:6} {r['load_best']:9.3f} {r['load_median']:7.3f} "
                f"{r['analyze_best']:12.3f} {r['analyze_median']:7.3f} {r['peak_mb']:8.0f}"
            )
        w, s = row["whole"], row["split"]
        print(
            f"{'':30} whole/split: load best {w['load_best'] / s['load_best']:.2f}x, "
            f"median {w['load_median'] / s['load_median']:.2f}x; analyze best "
            f"{w['analyze_best'] / s['analyze_best']:.2f}x, median "
            f"{w['analyze_median'] / s['analyze_median']:.2f}x; peak memory "
            f"{s['peak_mb'] / w['peak_mb']:.2f} of the whole load's"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
