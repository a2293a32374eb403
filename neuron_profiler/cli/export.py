"""``neuron-prof export TRACE -o OUT``: convert a trace; the format comes from OUT's suffix
(``exporters.writers``: .json / .json.gz Chrome trace, .pftrace Perfetto protobuf). TRACE may
also be a Neuron Explorer profile (converted on its own) or AWS's native PyTorch output
directory (its framework trace): ``explorer.inputs``. Argument parsing only."""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.exporters.writers import write_trace, writer_for
from neuron_profiler.output import check_output

PROGRESS_MIN_EVENTS = 500_000  # smaller traces export in about a second: no bar


@click.command()
@click.argument("trace_path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(path_type=Path),
    help="Output file: .json or .json.gz (Chrome trace) or .pftrace (Perfetto).",
)
@click.option(
    "--no-args",
    "no_args",
    is_flag=True,
    help=".pftrace only: leave event args out (smaller file, faster export).",
)
def export(trace_path: Path, output: Path, no_args: bool) -> None:
    """Load TRACE (any torch.profiler trace, a Neuron Explorer profile directory or Parquet
    table, or AWS's native PyTorch output directory) and write it to OUTPUT."""
    writer = writer_for(output)  # an unknown suffix: exit 2 before any work
    if no_args and not writer.args_optional:
        raise click.UsageError(
            f"--no-args: {output} is {writer.name}, which keeps every arg (only .pftrace can "
            "leave them out)"
        )
    check_output(output, [trace_path])  # before loading: an input is never overwritten
    from rich.progress import Progress

    from neuron_profiler.cli.main import load_reported, warn
    from neuron_profiler.explorer.inputs import load_input

    trace = load_reported(lambda: load_input(trace_path, warn, beside=False))
    with Progress(transient=True, disable=len(trace) < PROGRESS_MIN_EVENTS) as bar:
        task = bar.add_task(f"writing {output.name}", total=len(trace))

        def progress(done: int) -> None:
            bar.update(task, completed=done)

        written = write_trace(trace, output, progress=progress, args=not no_args)  # atomic
    click.echo(written.summary)
