"""``neuron-prof export TRACE -o OUT``: convert a trace; the format comes from OUT's extension
(.json / .json.gz: Chrome trace; .pftrace: Perfetto protobuf). Argument parsing only."""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.output import check_output

CHROME = (".json", ".json.gz")
PERFETTO = (".pftrace",)
PROGRESS_MIN_EVENTS = 500_000  # smaller traces export in about a second: no bar


@click.command()
@click.argument("trace_path", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path),
              help="Output file: .json or .json.gz (Chrome trace) or .pftrace (Perfetto).")
@click.option("--no-args", "no_args", is_flag=True,
              help=".pftrace only: leave event args out (smaller file, faster export).")
def export(trace_path: Path, output: Path, no_args: bool) -> None:
    """Load TRACE (any torch.profiler trace) and write it to OUTPUT."""
    if not output.name.endswith(CHROME + PERFETTO):
        raise NeuronProfilerError(f"{output}: unsupported output format (use one of "
                                  f"{', '.join(CHROME + PERFETTO)})", exit_code=2)
    check_output(output, [trace_path])  # before loading: an input is never overwritten
    from rich.progress import Progress

    from neuron_profiler.cli.main import load_reported
    from neuron_profiler.trace import load_trace

    trace = load_reported(lambda: load_trace(trace_path))
    with Progress(transient=True, disable=len(trace) < PROGRESS_MIN_EVENTS) as bar:
        task = bar.add_task(f"writing {output.name}", total=len(trace))

        def progress(done: int) -> None:
            bar.update(task, completed=done)

        summary = _write(trace, output, progress, args=not no_args)  # atomic; OutputError
    click.echo(summary)


def _write(trace, output: Path, progress, *, args: bool) -> str:  # noqa: ANN001
    """Writes with the exporter the extension names; returns the one-line summary."""
    if output.name.endswith(PERFETTO):
        from neuron_profiler.exporters.perfetto import write_perfetto_trace

        r = write_perfetto_trace(trace, output, progress=progress, args=args)
        left_out = sum(r.skipped.values()) + r.unbound_flow_endpoints + r.orphan_flow_endpoints
        details = ", ".join(f"{n} {why}" for why, n in r.skipped.items())
        return (f"wrote {r.slices} slices, {r.instants} instants, {r.flows} flows, "
                f"{r.counter_points} counter points to {output} ({r.overlap_tracks} overlap "
                f"tracks; left out: {left_out} events"
                + (f": {details}" if details else "")
                + (f", {r.unbound_flow_endpoints} unbound flow endpoints"
                   if r.unbound_flow_endpoints else "")
                + (f", {r.orphan_flow_endpoints} flow endpoints without their other end"
                   if r.orphan_flow_endpoints else "") + ")")
    from neuron_profiler.exporters.chrome import write_chrome_trace

    write_chrome_trace(trace, output, progress=progress)
    return f"wrote {len(trace)} events to {output}"
