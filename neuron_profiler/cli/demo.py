"""``neuron-prof demo``: profile a small transformer on the emulated device, say what ran, name
the commands that open the trace, and end with the analyzer's report on it (what
``neuron-prof analyze TRACE`` prints): every figure the demo shows is the analyzer's. Argument
parsing only; the workload is ``neuron_profiler.collectors.demo``, the report
``neuron-prof analyze``'s own command."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from neuron_profiler.cli.params import FiniteFloatRange

HTML_NAME = "report.html"
PERFETTO_NAME = "trace.pftrace"


@click.command()
@click.option(
    "-o",
    "--out-dir",
    type=click.Path(path_type=Path),
    default=Path("runs/demo"),
    show_default=True,
    help="Directory the trace is written to.",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 50),
    default=3,
    show_default=True,
    help="Profiled (active) training steps.",
)
@click.option(
    "--cores",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="Emulated NeuronCores; with more than one, a model replica per core "
    "(data-parallel, gradients averaged over the cores).",
)
@click.option("--chip", type=click.Choice(["trn2", "trn3"]), default="trn2", show_default=True)
@click.option(
    "--speed-factor",
    type=FiniteFloatRange(min=0.001),
    default=1.0,
    show_default=True,
    help="Divide modelled device durations by this factor.",
)
@click.option(
    "--numerics/--timing",
    default=False,
    show_default=True,
    help="Compute results on the host (numerics mode, small model) or not (timing "
    "mode, a device-bound model: the Trainium-like profile).",
)
def demo(
    out_dir: Path, steps: int, cores: int, chip: str, speed_factor: float, numerics: bool
) -> None:
    """Train a small transformer on the emulated Neuron device under torch.profiler, with one
    CPU-fallback op and a deliberately slow DataLoader; write the trace, say what ran and end
    with the analyzer's report on it. Exits with one error line when the NEURON collector is
    unavailable."""
    from neuron_profiler.collectors.demo import DemoConfig, run_demo

    result = run_demo(
        DemoConfig(
            out_dir=out_dir,
            steps=steps,
            cores=cores,
            chip=chip,
            speed_factor=speed_factor,
            numerics=numerics,
        )
    )
    for line in result.summary_lines():
        click.echo(line)
    if not result.trace_path.is_file():
        from neuron_profiler.errors import NeuronProfilerError

        raise NeuronProfilerError(f"{out_dir}: the profiler wrote no trace there")
    for line in open_commands(result.trace_path):
        click.echo(line)
    from neuron_profiler.cli.analyze import analyze

    click.echo(f"\n$ neuron-prof analyze {shlex.quote(str(result.trace_path))}")
    click.get_current_context().invoke(analyze, inputs=(result.trace_path,))


def open_commands(trace: Path) -> list[str]:
    """The commands that open this trace: the HTML report, Perfetto, chrome://tracing."""
    t = shlex.quote(str(trace))
    html = shlex.quote(str(trace.parent / HTML_NAME))
    pftrace = shlex.quote(str(trace.parent / PERFETTO_NAME))
    return [
        "open it:",
        f"  neuron-prof analyze {t} --html {html}",
        "      # the report below as one offline HTML page, with charts",
        f"  neuron-prof export {t} -o {pftrace}",
        "      # then open it in https://ui.perfetto.dev (the .json opens in chrome://tracing too)",
    ]
