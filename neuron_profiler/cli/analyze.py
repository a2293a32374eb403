"""``neuron-prof analyze TRACE... | DIR``: the bottleneck report of each trace (argument parsing
and output only; the work is ``neuron_profiler.analysis``).

A DIR stands for every ``*.json`` / ``*.json.gz`` under it (``*.pt.trace.json[.gz]`` included);
a file there that is not a trace is skipped with a warning. A Neuron Explorer profile (a
directory, a Parquet table or ``system_profile.json``; under DIR too, several ranks at once) is
analysed merged with the torch.profiler trace beside it, which is then not analysed on its own;
AWS's native PyTorch output directory stands for its framework traces, each binary file there
skipped with one line (``explorer.inputs``, ``explorer.native``). A named file that cannot be
analysed gets one error line; the others are still analysed, and the exit status is 2.
``--fail-on RULE`` exits 1 when a rule is breached (the worst trace and device count).

Files are analysed in parallel (``cli.workers``: a local process pool, ``--jobs``, or a Dask
cluster, ``--scheduler tcp://HOST:PORT``); the ranks of a torch.distributed run (files with a
rank in ``distributedInfo``) are then compared (``analysis.distributed``: stragglers, collective
waits), from small per-file summaries.
``--html FILE`` also writes one self-contained HTML page holding every trace analysed (a
section each) and the inputs that could not be; when no trace could be analysed it writes
nothing (an existing FILE is left as it was).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from neuron_profiler.cli.params import FiniteFloatRange
from neuron_profiler.errors import NeuronProfilerError

if TYPE_CHECKING:
    from neuron_profiler.cli.workers import FileResult

# numpy's OpenBLAS starts a thread per core when numpy is first imported, each spinning ~0.1 s
# of CPU waiting for work (on a 2-core machine, the core the analysis' second thread or the
# next process needs); the analysis never calls BLAS, so one thread is all it takes. Set before
# numpy is imported (the command imports it when it runs); a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HTML_TIMELINE_SEGMENTS = 2000  # per idle series (device and cause) in --html's timeline


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the report as JSON (schema: neuron_profiler/reports/report.schema.json).",
)
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Longest gaps and steps listed.",
)
@click.option(
    "--min-gap",
    "min_gap_us",
    default=50.0,
    show_default=True,
    type=FiniteFloatRange(min=0),
    help="Shortest idle gap given a cause, in µs.",
)
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    metavar="RULE",
    help="METRIC OP NUMBER, e.g. idle_pct>30 (repeatable; metrics: see "
    "neuron_profiler/analysis/metrics.py). Exit 1 when breached.",
)
@click.option(
    "--html",
    "html",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write the report as one self-contained HTML page (charts; works "
    "offline), every trace in it.",
)
@click.option(
    "--jobs",
    "-j",
    default=None,
    type=click.IntRange(min=1),
    help="Processes analysing files at once (default: one per CPU, at most one per file).",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="tcp://HOST:PORT",
    help="Analyse the files on this Dask cluster instead (needs the [dask] extra; "
    "the workers must see the files at the same paths).",
)
def analyze(
    inputs: tuple[Path, ...],
    as_json: bool,
    top: int,
    min_gap_us: float,
    fail_on: tuple[str, ...],
    html: Path | None,
    jobs: int | None,
    scheduler: str | None,
) -> None:
    """Rank what to fix first in each TRACE (or every trace under DIR); compare the ranks of a
    distributed run."""
    from neuron_profiler.analysis import Options
    from neuron_profiler.analysis.distributed import distributed
    from neuron_profiler.analysis.metrics import parse_rule
    from neuron_profiler.analysis.report import summaries_of
    from neuron_profiler.cli.main import warn
    from neuron_profiler.cli.workers import analyze_files

    rules = [parse_rule(r) for r in fail_on]  # a bad rule: exit 2 before any work
    if html is not None:
        from neuron_profiler.output import check_output

        check_output(html, inputs)  # before loading: an input is never overwritten
    options = Options(
        min_gap_ns=round(min_gap_us * 1e3),
        top=top,
        timeline_segments=None if html is None else HTML_TIMELINE_SEGMENTS,
    )
    files, errors = _expand(inputs)
    reports = []
    for result in analyze_files(files, options, jobs=jobs, scheduler=scheduler):
        for line in result.warnings:
            warn(line)
        if result.report is not None:
            reports.append(result.report)
        elif _skipped(result):
            warn(f"{result.path}: skipped, not a trace ({result.problem})")
        else:
            errors.append((result.path, result.problem))
    cross = distributed(summaries_of(reports))
    breaches = _breaches(rules, reports)
    _output(reports, errors, breaches, cross, as_json=as_json, top=top)
    if html is not None and not reports:  # a page of nothing must not replace a good one
        click.echo(
            f"neuron-prof: no trace could be analysed: {html} not written (left as it was)",
            err=True,
        )
    elif html is not None:
        from neuron_profiler.reports.html_report import write_html

        write_html(reports, html, errors, cross)  # atomic; OutputError
        n = len(reports)
        click.echo(
            f"neuron-prof: wrote the HTML report ({n} trace{'s' * (n != 1)}) to {html}", err=True
        )
    lone = len(errors) == 1 and not reports  # one bad input: its own line is the error
    for path, problem in [] if lone else errors:
        click.echo(f"neuron-prof: error: {path}: {problem}", err=True)
    for b in breaches:
        click.echo(
            f"neuron-prof: fail-on: {b['rule']} breached ({b['metric']} = {b['value']:.3f})",
            err=True,
        )
    if errors:
        raise NeuronProfilerError(
            f"{errors[0][0]}: {errors[0][1]}"
            if lone
            else f"{len(errors)} of {len(errors) + len(reports)} inputs could not be analysed",
            exit_code=2,
        )
    if breaches:
        raise NeuronProfilerError(f"{len(breaches)} --fail-on rule(s) breached", exit_code=1)


def _skipped(result: FileResult) -> bool:
    """A file found under a directory that is no trace at all (a config ``.json``) is skipped
    with a warning; a file named on the command line, or named as torch names its traces
    (``*.pt.trace.json[.gz]``), or a trace that could not be analysed, is an error."""
    from neuron_profiler.trace import vocabulary as V

    return (
        not result.named and result.not_a_trace and not result.path.endswith(V.TORCH_TRACE_SUFFIXES)
    )


def _expand(inputs: tuple[Path, ...]) -> tuple[list[tuple[Path, bool]], list[tuple[str, str]]]:
    """(file, named on the command line) pairs, and the inputs that name nothing usable."""
    from neuron_profiler.cli.main import warn
    from neuron_profiler.explorer.inputs import NO_TRACE_FILE, InputKind, input_kind, traces_under
    from neuron_profiler.explorer.native import read_native

    files: list[tuple[Path, bool]] = []
    errors: list[tuple[str, str]] = []
    for p in inputs:
        kind = input_kind(p)
        if kind is InputKind.EXPLORER:
            files.append((p, True))
        elif kind is InputKind.NATIVE:
            native = read_native(p)
            for line in native.skipped:
                warn(line)
            files += [(f, True) for f in native.traces.values()]
        elif p.is_dir():
            found, profiles = traces_under(p)
            if not found and not profiles:
                errors.append((str(p), NO_TRACE_FILE))
            files += [(f, False) for f in found] + [(d, True) for d in profiles]
        else:
            files.append((p, True))
    return files, errors


def _breaches(rules, reports) -> list[dict]:  # noqa: ANN001
    from neuron_profiler.analysis.metrics import metrics, worst

    if not rules or not reports:
        return []
    from neuron_profiler.cli.main import warn

    values = [metrics(r) for r in reports]
    out = []
    for rule in rules:
        value = worst(values, rule)
        if value is None:  # only traces without device time: nothing to judge
            warn(f"fail-on: {rule.text} not judged ({rule.metric}: no device time in any trace)")
            continue
        if rule.breached(value):
            out.append({"rule": rule.text, "metric": rule.metric, "value": value})
    return out


def _output(reports, errors, breaches, cross, *, as_json: bool, top: int) -> None:  # noqa: ANN001
    if as_json:
        from neuron_profiler.reports.json_report import document_pieces

        out = click.get_binary_stream("stdout")
        for piece in document_pieces(reports, errors, breaches, cross):  # never one 100 MB copy
            out.write(piece)
        out.write(b"\n")
        out.flush()
        return
    from rich.console import Console

    from neuron_profiler.reports.terminal import render_terminal, report_width

    # the terminal's own width (COLUMNS there); a pipe or a file gets PIPED_WIDTH columns
    console = Console(width=report_width(Console()))
    render_terminal(reports, console=console, top=top, cross=cross)
