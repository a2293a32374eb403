"""``neuron-prof capture --pid PID ... -o DIR``: profile the next steps of running processes
armed with ``neuron_profiler.on_demand.enable(dir=DIR)`` (argument parsing, progress and output
only; the protocol is ``neuron_profiler.on_demand``, the summary ``neuron_profiler.analysis``).

Every target is checked before any request is written (no such pid, not armed, a capture
already running, DIR not writable: one line, exit 2, nothing written). Then each process's
outcome is its own: the traces that were written are listed with a one-line summary each, the
failures one line each, and the exit status is 2 if any failed.
"""

from __future__ import annotations

from pathlib import Path

import click

from neuron_profiler.cli.params import FiniteFloatRange


@click.command()
@click.option(
    "--pid",
    "pids",
    multiple=True,
    type=click.IntRange(min=1),
    help="Process to capture (repeatable: one file per process, e.g. per rank).",
)
@click.option("--all", "every", is_flag=True, help="Every live process of yours armed in DIR.")
@click.option(
    "--steps", default=3, show_default=True, type=click.IntRange(1, 1000), help="Steps recorded."
)
@click.option(
    "--delay-steps",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Steps to let pass before the capture starts.",
)
@click.option("--memory", is_flag=True, help="Record memory (torch.profiler's profile_memory).")
@click.option("--stack", is_flag=True, help="Record Python stacks (with_stack).")
@click.option("--shapes", is_flag=True, help="Record input shapes (record_shapes).")
@click.option(
    "-o",
    "--dir",
    "directory",
    required=True,
    type=click.Path(path_type=Path),
    help="The directory the processes were armed with; traces are written there.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=300.0,
    show_default=True,
    type=FiniteFloatRange(min=0),
    help="Seconds to wait for every trace.",
)
def capture(
    pids: tuple[int, ...],
    every: bool,
    steps: int,
    delay_steps: int,
    memory: bool,
    stack: bool,
    shapes: bool,
    directory: Path,
    timeout_s: float,
) -> None:
    """Profile the next STEPS steps of running, armed processes (no restart); print each
    trace's path and a one-line summary."""
    from neuron_profiler.errors import NeuronProfilerError
    from neuron_profiler.on_demand import client
    from neuron_profiler.on_demand.protocol import Request

    if every and pids:
        raise client.CaptureError("give --pid or --all, not both")
    directory = directory.resolve()
    client.check_directory(directory)
    chosen = client.targets(directory, pids, every)
    request_id = client.new_request_id()
    request = Request(request_id, steps, delay_steps, memory, stack, shapes)
    requests = client.send_all(directory, chosen, request)
    click.echo(
        f"neuron-prof: capture {request_id}: asked {len(chosen)} process"
        f"{'es' * (len(chosen) != 1)} ({', '.join(map(str, chosen))}) for {steps} step"
        f"{'s' * (steps != 1)}",
        err=True,
    )
    outcomes = _wait_with_progress(directory, requests, timeout_s)
    failed = [o for o in outcomes if o.trace is None]
    for o in outcomes:
        if o.trace is not None:
            click.echo(str(o.trace))
            click.echo(f"  {_summary(o.trace)}")
            if o.note:
                click.echo(f"neuron-prof: warning: pid {o.pid}: {o.note}", err=True)
    for o in failed:
        click.echo(f"neuron-prof: error: {o.problem}", err=True)
    if failed:
        raise NeuronProfilerError(
            f"{len(failed)} of {len(outcomes)} captures did not complete", exit_code=2
        )


def _wait_with_progress(directory: Path, requests: dict, timeout_s: float) -> list:  # noqa: ANN001
    """``client.wait`` with a progress bar on stderr: steps seen over steps needed, summed
    over the processes (each one's total known once it has taken its request)."""
    from neuron_profiler.on_demand import client

    first = next(iter(requests.values()))
    per_pid = first.delay_steps + 1 + first.steps  # + the profiler's warm-up step
    seen: dict[int, int] = {}
    with click.progressbar(
        length=per_pid * len(requests), label="capturing", file=click.get_text_stream("stderr")
    ) as bar:

        def progress(pid: int, status) -> None:  # noqa: ANN001
            done = status.steps_total if status.final else status.steps_seen
            step = min(done, per_pid) - seen.get(pid, 0)
            if step > 0:
                bar.update(step)
                seen[pid] = seen.get(pid, 0) + step

        return client.wait(directory, requests, timeout_s, progress)


def _summary(path: Path) -> str:
    """The analyzer's headline for one trace (what ``neuron-prof analyze`` prints first)."""
    from neuron_profiler.analysis import analyze
    from neuron_profiler.analysis.metrics import metrics
    from neuron_profiler.analysis.report import NOTE_MODELLED, rank_text
    from neuron_profiler.cli.main import load_reported
    from neuron_profiler.errors import NeuronProfilerError
    from neuron_profiler.trace import load_trace

    try:
        report = analyze(load_reported(lambda: load_trace(path)))
    except NeuronProfilerError as err:
        return f"(not analysed: {err})"
    n = len(report.steps)
    values = metrics(report)
    idle_pct = values["idle_pct"]
    idle = f"device idle {idle_pct:.1f}%" if idle_pct is not None else "no device time in its steps"
    modelled = " (modelled: emulated device)" if NOTE_MODELLED in report.notes else ""
    return (
        f"{rank_text(report.rank)} · {n} step{'s' * (n != 1)} · mean step "
        f"{float(report.steps.wall_ns.mean()) / 1e6:.3f} ms · {idle}{modelled}"
    )
