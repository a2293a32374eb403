"""Whole-process analysis time and peak memory: ``neuron-prof analyze --json`` vs HTA 0.5.0's
load + temporal breakdown + idle-time breakdown, side by side, startup included.

    python bench/bench_analyze.py                        # every shared trace HTA can analyse
    python bench/bench_analyze.py --generated 1000000    # plus a generated trace (gen_trace.py)
    python bench/bench_analyze.py --alone 5000000 --repeat 3   # ours only, against the target
    python bench/bench_analyze.py --shapes               # the real shapes (gen_shapes.py), all
    python bench/bench_analyze.py --shapes meta old --variant small --repeat 3
    python bench/bench_analyze.py --shapes deep --size deep=1000000 --timeout 1200

``--against OTHER --files F ...``: ``analyze --json`` of each file with this checkout's code and
with the checkout at OTHER (e.g. /work/main), alternately (``--repeat`` runs each, interleaved and
each side first in turn, so that a shared machine's load falls on both alike), each with PYTHONPATH at its checkout: best
and median wall and CPU seconds per side, the ratios, the load average before and after.

``--alone N``: a generated trace of N events analysed by ``neuron-prof`` only, against the
issue's absolute target (5M events in at most 15 s and 2 GB); HTA is not run at that size (at
1M it already takes minutes and 1.3 GB, and it grows with the trace).

``--shapes [NAME ...]`` (none named: all of gen_shapes.SHAPES): each shape at its large and small
default size (``--variant``), generated once and cached under runs/bench/traces/shapes/, then
per shape in one run: ``analyze --json`` and HTA on it (a rank folder as one directory for
both), our ``load_trace`` and the decode floor (bench_load.py's ``decode_floor``) on each of its
files (summed over a rank folder; load and floor are the load call alone, in a fresh process,
interpreter start excluded). One row per shape with PASS/MISS against issue 25's goals (not
asserted): ``analyze --json`` >= 10x faster than HTA on traces of >= 400k events, >= 3x on
smaller ones; peak memory <= 1/2 of HTA's; load <= 1.5x the floor. An HTA or ``neuron-prof``
failure or timeout is written in its row; what ``neuron-prof`` printed on stderr (warnings) and
the ``load_warnings`` / ``notes`` of its report are listed under the table. JSON results:
runs/bench/analyze-shapes-<time>.json. A full run at the default sizes takes tens of minutes on
two cores (HTA dominates); ``--repeat 1`` (the default) keeps one run per tool.

Both tools run from byte-compiled sources, as an installed wheel does: HTA's site-packages
were compiled by pip; this package is compiled here first (an editable install under
``PYTHONDONTWRITEBYTECODE`` would otherwise recompile every module in every run, ~35 ms).
Each (tool, input) runs in a fresh process (``--repeat`` times: best time, median peak memory);
time = wall clock of the process; memory = its peak RSS (``os.wait4`` in a small launcher that
forks it, so that the bench's own size never leaks into the reading), or, where it starts
worker processes (both tools do for a folder of ranks), the peak of the summed PSS of its whole
process group sampled every 100 ms, when larger (``ru_maxrss`` counts one process only). HTA gets
a folder holding only the trace(s) (it reads a folder as ranks). Prints a table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
RUNS = REPO / "runs" / "bench"
SHAPE_TRACES = RUNS / "traces" / "shapes"
HTA = r"""
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=list(ta.t.traces), visualize=False)
"""
SAMPLE_S = 0.1  # process-group memory sampling period (a /proc scan: ~3 ms of CPU)
STDERR_LINES = 20  # last stderr lines kept per run (warnings, or the error)

# Issue 25's goals, whole process on every shape.
LARGE_EVENTS = 400_000  # a trace this large must be analysed >= SPEED_LARGE x faster than HTA
SPEED_LARGE, SPEED_SMALL = 10.0, 3.0
MEMORY_GOAL = 0.5  # peak memory at most half of HTA's
FLOOR_GOAL = 1.5  # load_trace at most 1.5x the decode floor


@dataclass
class Run:
    """One process: wall seconds, peak memory MB, exit status, its stderr's last lines, CPU
    seconds (user + system: steadier than wall time on a shared machine)."""

    seconds: float
    mb: float
    code: int
    stderr: list[str] = field(default_factory=list)
    timed_out: bool = False
    cpu_s: float = 0.0

    @property
    def error(self) -> str | None:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.code != 0:
            return f"exit {self.code}: {(self.stderr or ['?'])[-1][:160]}"
        return None


# The measured process is forked by this small launcher, not by the bench: a process's
# ru_maxrss starts at the RSS of the process it was forked from (Linux records the forked copy's
# high-water mark at exec), so a bench grown by a large report would raise every reading.
_LAUNCHER = r"""
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    cpu = usage.ru_utime + usage.ru_stime
    fh.write(f"{seconds} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)} {cpu}")
"""


def _group_pss_kb(pgid: int, skip: int = -1) -> tuple[int, int]:
    """(processes, summed PSS kB) of process group ``pgid`` but process ``skip`` (PSS: shared
    pages split between the processes mapping them, so forked workers are not counted twice)."""
    count, total = 0, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == skip:
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            if int(stat[stat.rindex(")") + 2 :].split()[2]) != pgid:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as fh:
                pss = next((int(line.split()[1]) for line in fh if line.startswith("Pss:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        count, total = count + 1, total + pss
    return count, total


class _GroupMemory(threading.Thread):
    """Peak summed PSS of the launcher's process group (the launcher left out) while it holds
    more than one process."""

    def __init__(self, pgid: int) -> None:
        super().__init__(daemon=True)
        self.pgid, self.peak_kb, self.done = pgid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            count, total = _group_pss_kb(self.pgid, skip=self.pgid)
            if count > 1:
                self.peak_kb = max(self.peak_kb, total)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


def run(
    argv: list[str],
    timeout: float | None = None,
    stdout: Path | None = None,
    cwd: Path | None = None,
) -> Run:
    """One process, forked by ``_LAUNCHER`` in a process group of its own (killed whole after
    ``timeout`` s): the launcher's wall time and ``ru_maxrss`` of it, or the group's sampled
    PSS when larger. stdout goes to ``stdout`` (else nowhere), stderr's last lines are kept."""
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        result, err_path = Path(tmp) / "result", Path(tmp) / "stderr"
        with open(err_path, "wb") as err, open(stdout or os.devnull, "wb") as out:
            launcher = [sys.executable, "-S", "-c", _LAUNCHER, str(result), *argv]
            proc = subprocess.Popen(
                launcher, stdout=out, stderr=err, start_new_session=True, cwd=cwd
            )
            memory = _GroupMemory(proc.pid)
            memory.start()
            timer = threading.Timer(timeout, _kill_group, (proc.pid,)) if timeout else None
            if timer:
                timer.start()
            proc.wait()
            if timer:
                timer.cancel()
            memory.done.set()
            memory.join()
            if _group_pss_kb(proc.pid)[0]:  # workers left behind (it was killed): ours to end
                _kill_group(proc.pid)
        lines = err_path.read_bytes().decode("utf-8", "replace").splitlines()[-STDERR_LINES:]
        if not result.exists():  # the launcher was killed: the timeout
            return Run(float(timeout or 0), memory.peak_kb / 1024, -9, lines, timed_out=True)
        seconds, maxrss_kb, code, cpu = result.read_text().split()
    mb = max(int(maxrss_kb), memory.peak_kb) / 1024
    return Run(float(seconds), mb, int(code), lines, cpu_s=float(cpu))


def best(cmd: list[str], repeat: int, timeout: float | None = None) -> dict:
    """Best time and median memory of ``repeat`` runs; the first failure instead, if any."""
    runs = []
    for _ in range(repeat):
        r = run(cmd, timeout)
        if r.error:
            return {"error": r.error, "stderr": r.stderr}
        runs.append(r)
    return {
        "s": min(r.seconds for r in runs),
        "mb": statistics.median(r.mb for r in runs),
        "cpu_s": min(r.cpu_s for r in runs),
        "stderr": runs[0].stderr,
    }


def ours_cmd(target: Path) -> list[str]:
    return [sys.executable, "-m", "neuron_profiler.cli.main", "analyze", "--json", str(target)]


def hta_cmd(folder: Path) -> list[str]:
    return [sys.executable, "-c", HTA, str(folder)]


def measure(path: Path, repeat: int) -> dict[str, tuple[float, float]] | None:
    folder = Path(tempfile.mkdtemp())
    (folder / path.name).symlink_to(path)
    out = {}
    for tool, cmd in (("ours", ours_cmd(path)), ("hta", hta_cmd(folder))):
        m = best(cmd, repeat)
        if "error" in m:
            return None  # HTA cannot analyse it (no kernel): nothing to compare
        out[tool] = (m["s"], m["mb"])
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


TARGET_S, TARGET_MB = 15.0, 2048.0  # the 5M-event target (issue 25: <= 15 s, <= 2 GB)


def alone(path: Path, repeat: int) -> None:
    """Ours only, every run listed, against the absolute target."""
    runs = [run(ours_cmd(path)) for _ in range(repeat)]
    if any(r.code != 0 for r in runs):
        raise SystemExit(f"{path}: neuron-prof analyze failed")
    times = ", ".join(f"{r.seconds:.2f}" for r in runs)
    peak = max(r.mb for r in runs)
    print(
        f"{path.name}: {times} s (target {TARGET_S:.0f} s), peak RSS {peak:.0f} MB "
        f"(target {TARGET_MB:.0f} MB): time {max(r.seconds for r in runs) / TARGET_S:.2f} "
        f"of the target, memory {peak / TARGET_MB:.2f}"
    )


# -- shapes ------------------------------------------------------------------------------------


class _TraceRemarks(msgspec.Struct):
    source: str = "?"
    load_warnings: list[str] = []
    notes: list[str] = []


class _Remarks(msgspec.Struct):
    """What ``_report_remarks`` reads of a report; the rest is skipped, not built (a report
    of 60k devices is hundreds of MB as Python objects)."""

    errors: list[Any] = []
    traces: list[_TraceRemarks] = []


def _report_remarks(path: Path) -> list[str]:
    """``errors``, and the ``load_warnings`` and ``notes`` of each trace, of a report."""
    try:
        doc = msgspec.json.decode(path.read_bytes(), type=_Remarks)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as err:
        return [f"report unreadable: {err}"]
    out = [f"error: {e}" for e in doc.errors]
    for t in doc.traces:
        name = Path(t.source).name
        out += [f"{name}: load warning: {w}" for w in t.load_warnings]
        out += [f"{name}: note: {n}" for n in t.notes]
    return out


def _ours(case, repeat: int, timeout: float) -> dict:  # noqa: ANN001 - gen_shapes.Case
    """``analyze --json`` runs; the first one's report is read for warnings and notes."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-shapes-") as tmp:
        report = Path(tmp) / "report.json"
        for i in range(repeat):
            r = run(ours_cmd(case.target), timeout, report if i == 0 else None)
            if r.error:
                return {"error": r.error, "stderr": r.stderr}
            runs.append(r)
            if i == 0:
                remarks = _report_remarks(report)
    return {
        "s": min(r.seconds for r in runs),
        "mb": statistics.median(r.mb for r in runs),
        "stderr": runs[0].stderr,
        "remarks": remarks,
    }


def _load_and_floor(case, repeat: int, timeout: float) -> dict:  # noqa: ANN001
    """Our ``load_trace`` and the decode floor, each file in a fresh process, summed."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_load import _best

    out: dict = {}
    for tool in ("ours", "floor"):
        results = [_best(sys.executable, tool, f, timeout, repeat) for f in case.files]
        failed = [r["error"] for r in results if "error" in r]
        key = "load" if tool == "ours" else "floor"
        out[key] = {"error": failed[0]} if failed else {"s": sum(r["wall_s"] for r in results)}
    return out


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def shape_row(case, repeat: int, timeout: float) -> dict:  # noqa: ANN001
    """Every measurement of one shape, the ratios and the goals' verdicts."""
    row = {"shape": case.name, "events": case.events, "target": str(case.target)}
    row["ours"] = _ours(case, repeat, timeout)
    row["hta"] = best(hta_cmd(case.folder), repeat, timeout)
    row.update(_load_and_floor(case, repeat, timeout))
    o, h, load, floor = row["ours"], row["hta"], row["load"], row["floor"]
    both = "s" in o and "s" in h
    row["speedup"] = h["s"] / o["s"] if both else None
    row["memory_ratio"] = o["mb"] / h["mb"] if both else None
    row["load_floor"] = load["s"] / floor["s"] if "s" in load and "s" in floor else None
    goal = SPEED_LARGE if case.events >= LARGE_EVENTS else SPEED_SMALL
    row["goals"] = {
        f"speed>={goal:.0f}x": None if row["speedup"] is None else row["speedup"] >= goal,
        f"memory<={MEMORY_GOAL}": None
        if row["memory_ratio"] is None
        else row["memory_ratio"] <= MEMORY_GOAL,
        f"load<={FLOOR_GOAL}xfloor": None
        if row["load_floor"] is None
        else row["load_floor"] <= FLOOR_GOAL,
    }
    return row


HEADER = (
    f"{'shape':<12} {'events':>9} {'ours s':>7} {'HTA s':>7} {'ratio':>6} {'ours MB':>8} "
    f"{'HTA MB':>7} {'ratio':>6} {'load s':>7} {'floor s':>7} {'ld/fl':>6}  goals "
    "(speed, memory, load)"
)


def _f(value: float | None, fmt: str, width: int) -> str:
    return f"{value:{width}{fmt}}" if value is not None else f"{'-':>{width}}"


def format_row(label: str, row: dict) -> str:
    o, h, ld, fl = row["ours"], row["hta"], row["load"], row["floor"]
    text = (
        f"{label:<12} {row['events']:>9} {_f(o.get('s'), '.2f', 7)} {_f(h.get('s'), '.2f', 7)} "
        f"{_f(row['speedup'], '.1f', 6)} {_f(o.get('mb'), '.0f', 8)} {_f(h.get('mb'), '.0f', 7)} "
        f"{_f(row['memory_ratio'], '.2f', 6)} {_f(ld.get('s'), '.2f', 7)} "
        f"{_f(fl.get('s'), '.2f', 7)} {_f(row['load_floor'], '.2f', 6)}  "
        + " ".join(_verdict(v) for v in row["goals"].values())
    )
    for who, m in (("ours", o), ("HTA", h), ("load", ld), ("floor", fl)):
        if "error" in m:
            text += f"  [{who}: {m['error']}]"
    return text


def _sizes(pairs: list[str]) -> dict[str, int]:
    out = {}
    for pair in pairs:
        name, _, n = pair.partition("=")
        out[name] = int(n)
    return out


def shapes(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from gen_shapes import SHAPES, cached

    names = args.shapes or list(SHAPES)
    variants = {"both": (False, True), "large": (False,), "small": (True,)}[args.variant]
    sizes = _sizes(args.size)
    opts = {"ranks": args.ranks} if args.ranks else {}
    cases = [
        (
            name,
            small,
            cached(
                name,
                SHAPE_TRACES,
                None if small else sizes.get(name),
                small,
                args.seed,
                **(opts if name == "ranks" else {}),
            ),
        )
        for small in variants
        for name in names
    ]
    print(HEADER, flush=True)
    rows = []
    for name, small, case in cases:
        row = shape_row(case, args.repeat, args.timeout)
        row["variant"] = "small" if small else "large"
        rows.append(row)
        print(format_row(f"{name}{' (s)' if small else ''}", row), flush=True)
    print(
        "\nspeed goal: >= 10x HTA on >= 400k events, >= 3x below; memory <= 0.5 of HTA's; "
        "load <= 1.5x the decode floor. (s) = small variant."
    )
    for row in rows:
        o = row["ours"]
        said = [f"stderr: {line}" for line in o.get("stderr", [])] + o.get("remarks", [])
        if said:
            print(f"\nneuron-prof on {row['target']}:\n  " + "\n  ".join(said))
    out = RUNS / f"analyze-shapes-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"repeat": args.repeat, "cpus": os.cpu_count(), "argv": sys.argv[1:]}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    print(f"\nresults: {out}")


def against(other: Path, files: list[Path], repeat: int, timeout: float) -> None:
    """This checkout against ``other`` on each file, runs interleaved (see the docstring)."""
    import compileall

    compileall.compile_dir(str(other / "neuron_profiler"), quiet=1)
    sides = {"this": REPO, "other": other.resolve()}
    print(f"load average before: {os.getloadavg()}; this={REPO} other={sides['other']}")
    print(
        f"{'trace':<32} {'side':<6} {'best s':>7} {'median s':>8} {'best cpu':>8} "
        f"{'median cpu':>10}"
    )
    for path in files:
        runs: dict[str, list[Run]] = {side: [] for side in sides}
        for k in range(repeat):  # this, other; other, this; ...: neither side always first
            for side, root in sorted(sides.items(), reverse=k % 2 == 1):
                os.environ["PYTHONPATH"] = str(root)  # (and run there: -m puts the cwd first)
                r = run(ours_cmd(path.resolve()), timeout, cwd=root)
                if r.error:
                    raise SystemExit(f"{side} on {path}: {r.error}")
                runs[side].append(r)
        figures = {}
        for side, rs in runs.items():
            wall, cpu = [r.seconds for r in rs], [r.cpu_s for r in rs]
            figures[side] = (min(wall), statistics.median(wall), min(cpu), statistics.median(cpu))
            print(
                f"{path.name[:32]:<32} {side:<6} {figures[side][0]:>7.2f} {figures[side][1]:>8.2f} "
                f"{figures[side][2]:>8.2f} {figures[side][3]:>10.2f}"
            )
        ratios = [o / t for t, o in zip(figures["this"], figures["other"], strict=True)]
        print(
            f"{'':<32} other/this: best {ratios[0]:.2f}x, median {ratios[1]:.2f}x, "
            f"best cpu {ratios[2]:.2f}x, median cpu {ratios[3]:.2f}x"
        )
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--generated", type=int, nargs="*", default=[])
    ap.add_argument("--alone", type=int, nargs="*", default=[])
    ap.add_argument(
        "--shapes",
        nargs="*",
        default=None,
        metavar="NAME",
        help="gen_shapes.py shapes (none named: all) instead of the shared traces",
    )
    ap.add_argument("--variant", choices=("both", "large", "small"), default="both")
    ap.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="NAME=N",
        help="a shape's large size (meta: processes; ranks: events per rank)",
    )
    ap.add_argument("--ranks", type=int, default=None, help="rank files of the ranks shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per process, seconds")
    ap.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="OTHER",
        help="another checkout: analyze --json of --files with both, interleaved",
    )
    ap.add_argument("--files", type=Path, nargs="*", default=[], metavar="TRACE")
    args = ap.parse_args()
    import compileall

    compileall.compile_dir(str(REPO / "neuron_profiler"), quiet=1)
    if args.against is not None:
        against(args.against, args.files, args.repeat, args.timeout)
        return
    if args.shapes is not None:
        shapes(args)
        return
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
