"""Trace load time and memory: ``neuron_profiler.trace.load_trace`` vs HTA 0.5.0, side by side.

    python bench/bench_load.py                       # shared traces + generated 100k / 1M / 5M
    python bench/bench_load.py --sizes 100000 --hta-max-events 100000
    python bench/bench_load.py --floor T1.json T2.json --against /work/main --repeat 5

Baseline: Holistic Trace Analysis 0.5.0 constructing ``TraceAnalysis(trace_dir=...)`` (default
parser) on a temporary folder holding only a symlink to the one trace. HTA runs in its own venv
(``--hta-python``, default /work/venv-hta/bin/python when it exists) because it pins other
library versions than the project. Every (tool, file) measurement runs in a fresh subprocess:
time = wall clock of the load call; memory = peak RSS growth of that process above its RSS after
imports (VmHWM reset through /proc/self/clear_refs after imports, read after the load). Each
shared trace is loaded ``--repeat`` times per tool (best time, median memory), the same for both.
Generated traces (bench/gen_trace.py, shaped like the shared A100 trace) are cached under
runs/bench/traces/. Results: a table with ratios on stdout and JSON under runs/bench/.

The decode floor (``decode_floor``, worker tool ``floor``): the least any loader of these files
could take in Python: gunzip (if gzipped) and one typed msgspec decode of the same bytes into a
list of structs holding the Chrome-trace event fields (ph, name, cat, pid, tid, ts, dur, id,
bp, s, args left raw), no columns built; bench_analyze.py's ``--shapes`` compares the load with it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
RUNS = REPO / "runs" / "bench"
DEFAULT_HTA = Path("/work/venv-hta/bin/python")

_WORKER = r"""
import json, os, resource, sys, time
tool, path, trace_dir = sys.argv[1], sys.argv[2], sys.argv[3]
if tool == "floor":
    from bench_load import decode_floor
    load = lambda: decode_floor(path)
elif tool == "ours":
    import warnings
    warnings.simplefilter("ignore")
    from neuron_profiler.trace import load_trace
    import neuron_profiler.trace.loader  # import everything the load needs up front
    load = lambda: load_trace(path)
else:
    import logging
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    load = lambda: TraceAnalysis(trace_dir=trace_dir)

def status():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out

try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current RSS
    reset = True
except OSError:
    reset = False
before = status()
cpu0, t0 = time.process_time(), time.perf_counter()
result = load()
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
after = status()
if tool == "hta":
    events = sum(len(df) for df in result.t.traces.values())
else:
    events = result if tool == "floor" else len(result)
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rss_after_imports_kb": before["VmRSS"],
                  "peak_kb": after["VmHWM"], "growth_kb": after["VmHWM"] - before["VmRSS"],
                  "hwm_reset": reset, "rows": events,
                  "children_maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _measure(python: str, tool: str, trace: Path, timeout: float, root: Path = REPO) -> dict:
    """One load in a fresh interpreter (``root``'s package); HTA gets a folder holding only
    this trace."""
    with tempfile.TemporaryDirectory(prefix="bench-load-") as folder:
        (Path(folder) / trace.name).symlink_to(trace.resolve())
        env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(root), str(REPO / "bench"))))
        try:
            proc = subprocess.run(
                [python, "-c", _WORKER, tool, str(trace), folder],
                env=env,
                cwd=root,  # (python -c puts the cwd first on sys.path)
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


class FloorEvent(msgspec.Struct):
    """The Chrome-trace event fields a loader reads, typed as Kineto writes them (``ts`` /
    ``dur`` as numbers: integer µs in 2021 files, µs with a ns fraction since); ``args`` left
    undecoded, as our loader keeps it."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    id: int | str | None = None
    bp: str = ""
    s: str = ""
    args: msgspec.Raw = msgspec.Raw(b"")


class _FloorDocument(msgspec.Struct):
    traceEvents: list[FloorEvent]  # noqa: N815 - the file's key


def decode_floor(path: Path | str) -> int:
    """Gunzip (if gzipped) and decode ``path`` into ``FloorEvent`` s; returns the event count."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return len(msgspec.json.decode(data, type=_FloorDocument).traceEvents)


def _best(python: str, tool: str, trace: Path, timeout: float, repeat: int) -> dict:
    """Best wall time of ``repeat`` fresh-process loads (the machine is shared and the small
    files take milliseconds), with the median memory growth of those runs."""
    runs = [_measure(python, tool, trace, timeout) for _ in range(repeat)]
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    growth = sorted(r["growth_kb"] for r in good)[len(good) // 2]
    return {**min(good, key=lambda r: r["wall_s"]), "growth_kb": growth, "runs": len(good)}


def _shared_files() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")))


def _generated(n: int) -> Path:
    path = RUNS / "traces" / f"gen_{n}.json"
    if not path.exists():
        sys.path.insert(0, str(REPO / "bench"))
        from gen_trace import generate_file

        print(f"generating {path} ...", flush=True)
        generate_file(n, path)
    return path


def _event_count(path: Path) -> int | None:
    name = path.name
    if name.startswith("gen_"):
        return int(name.split("_")[1].split(".")[0])
    return None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:8.1f}x" if a and b else "       -"


def _row(label: str, ours: dict, hta: dict | None) -> str:
    h = hta or {}
    o_mb = ours.get("growth_kb", 0) / 1024
    h_mb = h.get("growth_kb", 0) / 1024 if "growth_kb" in h else None
    h_s = h.get("wall_s")
    return (
        f"{label[:44]:44s} {ours.get('wall_s', float('nan')):8.3f} "
        f"{h_s if h_s is not None else float('nan'):9.3f} {_ratio(h_s, ours.get('wall_s'))} "
        f"{o_mb:9.1f} {h_mb if h_mb is not None else float('nan'):9.1f} "
        f"{(f'{o_mb / h_mb:8.2f}' if h_mb else '       -')}"
        + (f"  HTA: {h['error']}" if "error" in h else "")
        + (f"  ours: {ours['error']}" if "error" in ours else "")
    )


def against_floor(files: list[Path], other: Path | None, repeat: int, timeout: float) -> None:
    """``load_trace`` (this checkout, and ``other``'s if given) against the decode floor on
    each file: fresh processes, the tools interleaved in alternating order, best wall and
    best CPU time of ``repeat``, median peak growth."""
    import compileall

    sides = {"this": REPO, **({"other": other.resolve()} if other else {})}
    # both checkouts run byte-compiled, as an installed wheel does: under PYTHONDONTWRITEBYTECODE
    # an uncompiled tree recompiles every module in every run, and the heap that leaves behind
    # changes a small load's time and memory (~10%)
    for root in sides.values():
        compileall.compile_dir(str(root / "neuron_profiler"), quiet=1)
    tools = [(side, "ours", root) for side, root in sides.items()] + [("floor", "floor", REPO)]
    print(f"load average before: {os.getloadavg()}; this={REPO} other={other}")
    head = (
        f"{'trace':32} {'tool':6} {'best s':>7} {'cpu s':>7} {'MB':>6} {'/floor':>7} {'cpu/fl':>7}"
    )
    print(head)
    for path in files:
        runs: dict[str, list[dict]] = {side: [] for side, _, _ in tools}
        for k in range(repeat):
            for side, tool, root in tools if k % 2 == 0 else tools[::-1]:
                r = _measure(sys.executable, tool, path, timeout, root)
                if "error" in r:
                    raise SystemExit(f"{side} on {path}: {r['error']}")
                runs[side].append(r)
        best = {s: min(r["wall_s"] for r in rs) for s, rs in runs.items()}
        cpu = {s: min(r["cpu_s"] for r in rs) for s, rs in runs.items()}
        for side, rs in runs.items():
            mb = sorted(r["growth_kb"] for r in rs)[len(rs) // 2] / 1024
            print(
                f"{path.parent.name[:32]:32} {side:6} {best[side]:7.3f} {cpu[side]:7.3f} "
                f"{mb:6.0f} {best[side] / best['floor']:7.2f} {cpu[side] / cpu['floor']:7.2f}",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="100000,1000000,5000000",
        help="generated trace sizes (events), comma-separated; '' for none",
    )
    parser.add_argument(
        "--hta-python",
        default=str(DEFAULT_HTA) if DEFAULT_HTA.exists() else sys.executable,
        help="interpreter with holistictraceanalysis 0.5.0",
    )
    parser.add_argument(
        "--hta-max-events",
        type=int,
        default=1_000_000,
        help="run HTA only on generated traces up to this size (it needs about "
        "2 min and 1.3 GB per 1M events here)",
    )
    parser.add_argument("--no-shared", action="store_true", help="skip the shared traces")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="fresh-process loads per tool and shared trace (best time kept)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=None, help="JSON results path")
    parser.add_argument(
        "--floor",
        type=Path,
        nargs="+",
        metavar="TRACE",
        help="only load_trace against the decode floor on these traces (no HTA)",
    )
    parser.add_argument(
        "--against", type=Path, default=None, help="with --floor: another checkout's load too"
    )
    args = parser.parse_args()
    if args.floor:
        against_floor(args.floor, args.against, args.repeat, args.timeout)
        return 0

    files = [] if args.no_shared else _shared_files()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    generated = [_generated(n) for n in sizes]
    header = (
        f"{'trace':44s} {'ours s':>8s} {'HTA s':>9s} {'speedup':>9s} "
        f"{'ours MB':>9s} {'HTA MB':>9s} {'mem ratio':>8s}"
    )
    print(f"HTA interpreter: {args.hta_python}\n{header}\n{'-' * len(header)}", flush=True)
    results: list[dict] = []
    total = {"ours_s": 0.0, "hta_s": 0.0, "ours_growth_kb": 0, "hta_growth_kb": 0}
    for path in files + generated:
        label = str(path.relative_to(SHARED)) if path.is_relative_to(SHARED) else path.name
        shared = path in files
        repeat = args.repeat if shared else 1  # generated traces: seconds to minutes each
        ours = _best(sys.executable, "ours", path, args.timeout, repeat)
        n = _event_count(path)
        hta = None
        if n is None or n <= args.hta_max_events:
            hta = _best(args.hta_python, "hta", path, args.timeout, repeat)
        print(_row(label, ours, hta), flush=True)
        results.append(
            {
                "trace": label,
                "shared": shared,
                "bytes": path.stat().st_size,
                "ours": ours,
                "hta": hta,
            }
        )
        if shared and "error" not in ours and hta and "error" not in hta:
            total["ours_s"] += ours["wall_s"]
            total["hta_s"] += hta["wall_s"]
            total["ours_growth_kb"] += ours["growth_kb"]
            total["hta_growth_kb"] += hta["growth_kb"]
    if files:
        print("-" * len(header))
        print(
            _row(
                f"TOTAL over {len(files)} shared traces",
                {"wall_s": total["ours_s"], "growth_kb": total["ours_growth_kb"]},
                {"wall_s": total["hta_s"], "growth_kb": total["hta_growth_kb"]},
            )
        )
        if total["ours_s"] and total["hta_growth_kb"]:
            print(
                f"load time: {total['hta_s'] / total['ours_s']:.1f}x faster than HTA "
                f"(target >= 10x); memory growth (sum over files): "
                f"{total['ours_growth_kb'] / total['hta_growth_kb']:.2f} of HTA's "
                f"(target <= 0.5)"
            )
    out = args.out or RUNS / f"load-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "hta_python": args.hta_python,
                "cpus": os.cpu_count(),
                "results": results,
                "shared_total": total,
            },
            indent=1,
        )
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
