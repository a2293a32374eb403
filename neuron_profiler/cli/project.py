"""``neuron-prof project TRACE --chip CHIP``: the step time the traced script would have on
another chip (argument parsing and output only; the work is
``neuron_profiler.analysis.projection``). ``--chip same`` replays the trace on its own chip: the
check that its dependencies explain the recorded step. Bad input is one error line naming the
file and the problem, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.costmodel.chips import CHIPS

CHOICES = ("same", *CHIPS)  # analysis.projection.TARGETS, without importing numpy for --help


@click.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--chip",
    "target",
    required=True,
    type=click.Choice(CHOICES),
    help="Target chip profile (docs/chips.md); 'same': the trace's own chip (replay check).",
)
@click.option(
    "--source-chip",
    default=None,
    type=click.Choice(tuple(CHIPS)),
    help="The chip the trace ran on: needed when its deviceProperties name no known chip; "
    "otherwise it overrides them (said among the assumptions).",
)
@click.option(
    "--what-if",
    "what_if",
    multiple=True,
    metavar="EDIT",
    help="Replay an edit on the same graph and print its projected change: 'no-fallback:OP', "
    "'no-data-stall', 'batch xN', 'compiled', 'overlap-comm' (repeatable).",
)
@click.option(
    "--html",
    "html",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write one self-contained, offline HTML page of the projection.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the projection as JSON (schema: neuron_profiler/reports/projection.schema.json).",
)
def project(
    trace_path: Path,
    target: str,
    source_chip: str | None,
    what_if: tuple[str, ...],
    html: Path | None,
    as_json: bool,
) -> None:
    """Project TRACE's mean step onto another chip."""
    from neuron_profiler.analysis.projection import project as project_trace
    from neuron_profiler.analysis.what_if import parse_what_if
    from neuron_profiler.cli.main import load_reported, warn
    from neuron_profiler.explorer.inputs import load_input

    for edit in what_if:  # bad edits before the trace is read
        parse_what_if(edit, str(trace_path))
    if html is not None:
        from neuron_profiler.output import check_output

        check_output(html, [trace_path])  # before loading: the input is never overwritten
    # any input analyze reads: a torch.profiler trace, an Explorer profile, AWS's native output
    trace = load_reported(lambda: load_input(trace_path, warn))
    p = project_trace(trace, target, source=source_chip, what_if=what_if)
    if html is not None:
        from neuron_profiler.reports.projection_html import write_projection_html

        write_projection_html(p, html)  # atomic; OutputError
        click.echo(f"neuron-prof: wrote the projection page to {html}", err=True)
    if as_json:
        from neuron_profiler.reports.projection_json import document_text, projection_document

        click.echo(document_text(projection_document(p)))
    else:
        from rich.console import Console

        from neuron_profiler.reports.projection_terminal import render_projection
        from neuron_profiler.reports.terminal import report_width

        render_projection(p, console=Console(width=report_width(Console())))
