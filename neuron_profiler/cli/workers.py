"""Where ``neuron-prof analyze`` analyses its files: one trace per task, so no process ever holds
every rank's trace at once::

    results = analyze_files([(path, named), ...], options, jobs=4)              # process pool
    results = analyze_files(files, options, scheduler="tcp://10.0.0.5:8786")    # Dask cluster

A task loads one trace, analyses it and returns its ``Report`` (with its small cross-rank
summary, ``Report.rank_summary``) and the warning lines its loading produced; the parent prints
the lines and reduces the summaries. One file, or ``jobs=1``, runs in this process. A task
that fails (a bad file, a crashed worker) is that file's problem, never the run's; results come
back in input order whatever the backend, so every backend gives the same output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from neuron_profiler.errors import NeuronProfilerError, TraceLoadError

if TYPE_CHECKING:
    from neuron_profiler.analysis import Options, Report

DASK_HINT = "pip install 'neuron-profiler[dask]'"
CONNECT_TIMEOUT_S = 30  # a scheduler that does not answer by then is an error


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: a report, or the problem that stopped it."""

    path: str
    named: bool  # named on the command line (not found under a directory)
    report: Report | None
    problem: str
    warnings: tuple[str, ...]
    not_a_trace: bool = False  # the file is no trace at all (``TraceLoadError.not_a_trace``)


def analyze_file(path: str, named: bool, options: Options, *, last: bool = False) -> FileResult:
    """The task: load, analyse, summarise one trace (in whatever process runs it); a Neuron
    Explorer profile is merged with the host trace beside it on the fly (``explorer.inputs``).
    ``last``: the CLI's process analyses nothing after it, so the trace is left for the
    process's end (``cli.main.leave_for_exit``) rather than freed here."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.cli.main import load_reported
    from neuron_profiler.explorer.inputs import load_input

    lines: list[str] = []
    try:
        trace = load_reported(lambda: load_input(Path(path), lines.append), say=lines.append)
    except TraceLoadError as err:
        return FileResult(path, named, None, err.problem, tuple(lines), err.not_a_trace)
    except NeuronProfilerError as err:  # e.g. Parquet without pyarrow: that file's problem
        return FileResult(path, named, None, str(err), tuple(lines))
    try:
        report = analyze(trace, options)
    except Exception as err:  # noqa: BLE001 -- one file's failure must not stop the others
        return FileResult(
            path, named, None, f"analysis failed: {type(err).__name__}: {err}", tuple(lines)
        )
    if last:
        from neuron_profiler.cli.main import leave_for_exit

        leave_for_exit(trace)
    return FileResult(path, named, report, "", tuple(lines))


def analyze_files(
    files: list[tuple[Path, bool]],
    options: Options,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> list[FileResult]:
    args = [(str(p), named) for p, named in files]
    if scheduler:
        return _dask(args, options, scheduler)
    jobs = jobs or min(len(args), os.cpu_count() or 1)
    if jobs <= 1 or len(args) <= 1:
        return [
            analyze_file(p, named, options, last=k == len(args) - 1)
            for k, (p, named) in enumerate(args)
        ]
    return _pool(args, options, jobs)


BROKEN = "worker failed: BrokenProcessPool"


def _failed(path: str, named: bool, err: BaseException) -> FileResult:
    return FileResult(path, named, None, f"worker failed: {type(err).__name__}: {err}", ())


def _pool(args: list[tuple[str, bool]], options: Options, jobs: int) -> list[FileResult]:
    """A worker that dies (a crash, the OOM killer) breaks the whole pool: the files it took
    down with it are rerun one per fresh process, so only the file that kills its process
    fails."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(analyze_file, p, named, options) for p, named in args]
        results = [_result(f, p, named) for f, (p, named) in zip(futures, args, strict=True)]
    for i, (p, named) in enumerate(args):
        if results[i].problem.startswith(BROKEN):
            with ProcessPoolExecutor(max_workers=1) as alone:
                results[i] = _result(alone.submit(analyze_file, p, named, options), p, named)
    return results


def _result(future, path: str, named: bool) -> FileResult:  # noqa: ANN001
    try:
        return future.result()
    except Exception as err:  # noqa: BLE001 -- a crashed worker: that file's error line
        return _failed(path, named, err)


def _dask(args: list[tuple[str, bool]], options: Options, address: str) -> list[FileResult]:
    try:
        from distributed import Client
    except ImportError:
        raise NeuronProfilerError(
            f"--scheduler needs dask.distributed ({DASK_HINT})", exit_code=2
        ) from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as err:  # ValueError: a malformed address
        raise NeuronProfilerError(
            f"--scheduler {address}: cannot connect ({err})", exit_code=2
        ) from None
    with client:
        futures = client.map(
            analyze_file, [p for p, _ in args], [n for _, n in args], options=options, pure=False
        )
        return [_result(f, p, named) for f, (p, named) in zip(futures, args, strict=True)]
