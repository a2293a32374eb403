"""``neuron-prof diff A B``: where the mean step time changed between two traces of the same
script (argument parsing and output only; the work is ``neuron_profiler.analysis.diff``).

A and B are trace files, or directories of rank traces (``*.json`` / ``*.json.gz``, as many on
each side): the files are paired by their distributedInfo rank, or in name order when the ranks
do not allow it (``analysis.rank_pairs``; the report says which, and why), each pair diffed;
``--json``'s top level is the pair whose mean step changed most, ``--fail-on`` reads the worst
pair. Bad
input is one error line naming the file and the problem, exit 2; a breached rule exits 1.
"""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.cli.params import FiniteFloatRange
from neuron_profiler.errors import NeuronProfilerError


@click.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the diff as JSON (schema: neuron_profiler/reports/diff.schema.json).",
)
@click.option(
    "--html",
    "html",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write a self-contained HTML page (waterfall and tables, works offline).",
)
@click.option(
    "--steps",
    default="auto",
    show_default=True,
    metavar="auto|number|position|N-M|N,M",
    help="Steps compared: every ProfilerStep number in both (auto; by position when none is "
    "common), by number, by position, or these step numbers.",
)
@click.option(
    "--map",
    "map_file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="Extra op name rules (JSON, as neuron_profiler/analysis/name_map.json), applied "
    "before the package's.",
)
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    metavar="RULE",
    help="METRIC OP NUMBER[%], e.g. 'delta_ms>5%' (% of A's mean step; metrics: delta_ms, "
    "residual_ms, worst_row_ms, <cause>_delta_ms). Exit 1 when breached.",
)
@click.option(
    "--top",
    default=25,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows shown before the rest fold into 'other'.",
)
@click.option(
    "--by",
    "group_by",
    type=click.Choice(["op", "module"]),
    default="op",
    show_default=True,
    help="Rows of the ops: by op (alignment key) or by module (an op inside an nn.Module "
    "frame goes to its innermost module's row, matched by path; record with with_stack=True "
    "and with_modules=True).",
)
@click.option(
    "--min-gap",
    "min_gap_us",
    default=50.0,
    show_default=True,
    type=FiniteFloatRange(min=0),
    help="Shortest idle gap given a cause, in µs (as analyze).",
)
def diff(
    a: Path,
    b: Path,
    as_json: bool,
    html: Path | None,
    steps: str,
    map_file: Path | None,
    fail_on: tuple[str, ...],
    top: int,
    min_gap_us: float,
    group_by: str,
) -> None:
    """Where the mean step time went between trace A and trace B (files or rank
    directories)."""
    from neuron_profiler.analysis import Options
    from neuron_profiler.analysis.align import StepChoice
    from neuron_profiler.analysis.diff import DIFF_METRICS, metric_value
    from neuron_profiler.analysis.diff import diff as diff_traces
    from neuron_profiler.analysis.metrics import parse_rule, worst
    from neuron_profiler.analysis.name_map import NameMap

    rules = [parse_rule(r, DIFF_METRICS, percent=True) for r in fail_on]  # exit 2 first
    choice = StepChoice.parse(steps)
    names = NameMap.load(map_file)
    options = Options(min_gap_ns=round(min_gap_us * 1e3), hta=False, tb=False)
    pairing = _pairs(a, b)
    if html is not None:
        from neuron_profiler.output import check_output

        check_output(html, [f for pair in pairing.pairs for f in pair])  # never over an input
    diffs = [
        diff_traces(
            _load(fa), _load(fb), steps=choice, names=names, options=options, group_by=group_by
        )
        for fa, fb in pairing.pairs
    ]
    breaches = []
    for rule in rules:
        values = [{rule.metric: metric_value(d, rule.metric, rule.percent)} for d in diffs]
        value = worst(values, rule)  # every diff has the metric: never None
        if value is not None and rule.breached(value):
            breaches.append({"rule": rule.text, "metric": rule.metric, "value": value})
    if as_json:
        from neuron_profiler.reports.diff_json import diff_document, document_text

        click.echo(document_text(diff_document(diffs, breaches, top, pairing)))
    else:
        from rich.console import Console

        from neuron_profiler.reports.diff_terminal import render_diff
        from neuron_profiler.reports.terminal import report_width

        render_diff(diffs, console=Console(width=report_width(Console())), top=top, pairing=pairing)
    if html is not None:
        from neuron_profiler.reports.diff_html import write_diff_html

        write_diff_html(diffs, html, top, pairing)  # atomic; OutputError
        click.echo(f"neuron-prof: wrote the diff page to {html}", err=True)
    for br in breaches:
        click.echo(
            f"neuron-prof: fail-on: {br['rule']} breached ({br['metric']} = {br['value']:.3f})",
            err=True,
        )
    if breaches:
        raise NeuronProfilerError(f"{len(breaches)} --fail-on rule(s) breached", exit_code=1)


def _pairs(a: Path, b: Path):  # noqa: ANN202 -- a RankPairs (imported lazily)
    """The two files, or two directories' traces paired by rank (else in name order)."""
    from neuron_profiler.analysis.rank_pairs import pair_ranks, two_files

    ranks_a, ranks_b = _is_rank_dir(a), _is_rank_dir(b)
    if ranks_a != ranks_b:
        raise NeuronProfilerError(
            f"{a if ranks_a else b}: a directory compared with a file: give two trace "
            "files (or Neuron Explorer profiles) or two rank directories",
            exit_code=2,
        )
    if not ranks_a:
        return two_files(a, b)
    fa, fb = _traces(a), _traces(b)
    if len(fa) != len(fb):
        raise NeuronProfilerError(
            f"{b}: {len(fb)} trace file{'s' * (len(fb) != 1)}, {a} has {len(fa)}: rank "
            "directories must hold as "
            "many traces each (paired by rank, or in name order)",
            exit_code=2,
        )
    return pair_ranks(fa, fb, rank_of=_rank_of)


def _rank_of(path: Path) -> int | None:
    """A trace's rank; an Explorer profile's is its host trace's (merged with it on loading)."""
    from neuron_profiler.analysis.rank_pairs import header_rank
    from neuron_profiler.explorer.inputs import host_trace_beside

    host = host_trace_beside(path) if path.is_dir() else path
    return header_rank(host) if host is not None else None


def _is_rank_dir(path: Path) -> bool:
    """A directory of rank traces: not one trace that happens to be a directory (a Neuron
    Explorer profile, AWS's native PyTorch output; ``explorer.inputs``)."""
    if not path.is_dir():
        return False
    from neuron_profiler.explorer.inputs import InputKind, input_kind

    return input_kind(path) is InputKind.TRACE


def _traces(directory: Path) -> list[Path]:
    """The directory's traces, as ``analyze`` reads a directory (``explorer.traces_under``):
    the JSON files the loader calls traces (``is_trace_file``: named as torch names its traces,
    or holding ``traceEvents``), and Explorer profiles; other JSON files (a capture's status
    files, a config) are skipped with a warning, as ``analyze`` skips them."""
    from neuron_profiler.cli.main import warn
    from neuron_profiler.explorer.inputs import NO_TRACE_FILE, traces_under
    from neuron_profiler.trace.loader import is_trace_file

    files, profiles = traces_under(directory)
    found = []
    for f in files:
        if is_trace_file(f):
            found.append(f)
        else:
            warn(f"{f}: skipped, not a trace (no traceEvents)")
    found = sorted(found + profiles)
    if not found:
        raise NeuronProfilerError(f"{directory}: {NO_TRACE_FILE}", exit_code=2)
    return found


def _load(path: Path):  # noqa: ANN202 -- a Trace (the model is imported lazily)
    """Any input ``analyze`` takes: a trace, or a Neuron Explorer profile merged on the fly
    with the host trace beside it (``explorer.inputs``)."""
    from neuron_profiler.cli.main import load_reported, warn
    from neuron_profiler.explorer.inputs import load_input

    return load_reported(lambda: load_input(path, warn))
