"""``neuron-prof merge HOST_TRACE DEVICE_EVENTS... -o OUT``: device events onto a host trace.

DEVICE_EVENTS are runtime system-trace JSON files as fetched (or the emulator's dump), or Neuron
Explorer profiles (a profile directory, a Parquet table, the legacy ``system_profile.json``):
the kind is detected per input (``explorer.inputs``). The output format comes from OUT's suffix
(``exporters.writers``). The work is ``runtime_trace.merge`` and ``explorer.profile_trace``;
this module only parses arguments and prints the summary.
"""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.exporters.writers import write_trace, writer_for
from neuron_profiler.output import check_output, same_file
from neuron_profiler.trace import vocabulary as V


@click.command()
@click.argument("host_trace", type=click.Path(path_type=Path))
@click.argument("device_events", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(path_type=Path),
    help="Output file: .json or .json.gz (Chrome trace), .pftrace (Perfetto).",
)
def merge(host_trace: Path, device_events: tuple[Path, ...], output: Path) -> None:
    """Place DEVICE_EVENTS on HOST_TRACE's timeline and write the merged trace to OUTPUT."""
    from neuron_profiler.cli.main import load_reported, warn
    from neuron_profiler.explorer.inputs import InputKind, input_kind
    from neuron_profiler.runtime_trace.merge import merge_files

    writer_for(output)  # an unknown suffix: exit 2 before any work
    check_output(output, [host_trace, *device_events])  # before loading: inputs stay untouched
    _check_distinct([host_trace, *device_events])
    explorer = [p for p in device_events if input_kind(p) is InputKind.EXPLORER]
    if explorer:
        _merge_explorer(host_trace, device_events, explorer, output)
        return
    result = load_reported(lambda: merge_files(host_trace, list(device_events)), lambda r: r.trace)
    files = ", ".join(map(str, device_events))
    if result.malformed:
        warn(
            f"{files}: {result.malformed} device events malformed (mistyped, missing or "
            "out-of-range fields: skipped, or kept without the bad field)"
        )
    if result.truncated:
        warn(
            f"{files}: cut off; kept every complete event before the cut "
            f"({result.truncated} envelope(s))"
        )
    write_trace(result.trace, output)  # atomic
    kinds = ", ".join(f"{n} {k.lower()}" for k, n in result.by_kind.items()) or "none"
    click.echo(
        f"merged {result.activities} device activities ({kinds}) from "
        f"{len(device_events)} file(s) onto {host_trace}"
    )
    click.echo(
        f"linked to host ops: {result.linked}, unlinked: {result.unlinked}; {result.flows} flows"
    )
    for core, pid in sorted(result.relocated_cores.items()):
        click.echo(
            f"{V.core_process_name(core)} placed at pid {pid} (the host trace uses pid {core})"
        )
    dropped = sum(result.dropped.values()) if result.drops_known else "unknown (not reported)"
    click.echo(
        f"unpaired {result.unpaired}, malformed {result.malformed}, dropped by the "
        f"runtime {dropped}, outside the host trace's span {result.outside_host_window}"
    )
    click.echo(f"wrote {len(result.trace)} events to {output}")


def _merge_explorer(
    host_trace: Path, inputs: tuple[Path, ...], explorer: list[Path], output: Path
) -> None:
    """Neuron Explorer profiles onto HOST_TRACE, one after another (several ranks' profiles)."""
    from neuron_profiler.cli.main import load_reported
    from neuron_profiler.errors import NeuronProfilerError
    from neuron_profiler.explorer.profile_trace import merge_profile
    from neuron_profiler.explorer.reader import read_profile
    from neuron_profiler.trace import load_trace

    if len(explorer) != len(inputs):
        raise NeuronProfilerError(
            "give either runtime system-trace files or Neuron Explorer profiles, not both",
            exit_code=2,
        )
    trace = load_reported(lambda: load_trace(host_trace))
    for path in explorer:
        result = merge_profile(trace, read_profile(path))
        trace = result.trace
        m = result.merge
        kinds = ", ".join(f"{n} {k.lower()}" for k, n in m.by_kind.items()) or "none"
        click.echo(f"merged {m.activities} device activities ({kinds}) from {path}")
        click.echo(
            f"linked to host ops: {m.linked}, unlinked: {m.unlinked}; {m.flows + result.arrows} "
            f"flows; {result.hbm_samples} HBM samples"
        )
    write_trace(trace, output)  # atomic
    click.echo(f"wrote {len(trace)} events to {output}")


def _check_distinct(inputs: list[Path]) -> None:
    """Refuse an input given twice (any spelling, links included): its events would be merged
    twice, every device activity doubled and half of them unpaired. Pipes and devices are left
    to the reader, which refuses them in its own words."""
    inputs = [p for p in inputs if p.is_file() or p.is_dir()]
    for i, later in enumerate(inputs):
        for earlier in inputs[:i]:
            if same_file(earlier, later):
                raise click.UsageError(
                    f"{later} is given twice (also as {earlier}); its events would be merged twice"
                )
