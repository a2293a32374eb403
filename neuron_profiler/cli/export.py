"""``neuron-prof export TRACE -o OUT``: convert a trace; the format comes from OUT's extension."""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.errors import NeuronProfilerError


@click.command()
@click.argument("trace_path", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path),
              help="Output file: .json or .json.gz (Chrome trace).")
def export(trace_path: Path, output: Path) -> None:
    """Load TRACE (any torch.profiler trace) and write it to OUTPUT."""
    from rich.progress import Progress

    from neuron_profiler.exporters.chrome import EXTENSIONS, write_chrome_trace
    from neuron_profiler.trace import load_trace

    if not output.name.endswith(EXTENSIONS):
        raise NeuronProfilerError(f"{output}: unsupported output format (use one of "
                                  f"{', '.join(EXTENSIONS)})", exit_code=2)
    trace = load_trace(trace_path)
    with Progress(transient=True, disable=len(trace) < 1_000_000) as bar:
        task = bar.add_task(f"writing {output.name}", total=len(trace))
        write_chrome_trace(trace, output, progress=lambda done: bar.update(task, completed=done))
    click.echo(f"wrote {len(trace)} events to {output}")
