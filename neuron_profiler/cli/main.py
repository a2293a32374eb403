"""``neuron-prof``: the entry point. Subcommands live one per module and are imported lazily,
so ``neuron-prof --help`` and the analysis commands start without importing torch.

Errors: library code raises ``NeuronProfilerError`` (carrying an exit code); this module is the
one place that turns it into a one-line message and the process status. Warnings (Python's and
what a loaded trace lost) are printed here too, one line each, never with a source line.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from neuron_profiler.errors import NeuronProfilerError

if TYPE_CHECKING:
    from neuron_profiler.trace.model import Trace

T = TypeVar("T")

# subcommand name -> "module:attribute" of a click.Command
# Subcommand modules must not import torch at module level (``--help`` imports them all).
SUBCOMMANDS: dict[str, str] = {
    "analyze": "neuron_profiler.cli.analyze:analyze",
    "capture": "neuron_profiler.cli.capture:capture",
    "demo": "neuron_profiler.cli.demo:demo",
    "diff": "neuron_profiler.cli.diff:diff",
    "export": "neuron_profiler.cli.export:export",
    "merge": "neuron_profiler.cli.merge:merge",
    "project": "neuron_profiler.cli.project:project",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="neuron-profiler")
def cli() -> None:
    """Profile PyTorch on AWS Trainium (or its emulated device), analyse and export traces."""


def warn(message: str) -> None:
    """One warning line on stderr (line breaks folded, so nothing can follow it)."""
    click.echo(f"neuron-prof: warning: {' '.join(str(message).split())}", err=True)


def _showwarning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    warn(str(message))


def load_reported(
    load: Callable[[], T],
    trace_of: Callable[[T], Trace] | None = None,
    *,
    say: Callable[[str], None] | None = None,
) -> T:
    """Run ``load`` and report what the loaded trace lost or had changed, so nothing is dropped
    silently: its Python warnings as single lines, then a truncated or damaged file (only if the
    loader did not already warn about it), mistyped events skipped, and each count of
    ``Trace.load_report`` (replaced text, values and nesting, dropped and relabelled ids,
    trailing data, an unusable baseTimeNanoseconds). A trace with nothing usable (no event but
    metadata: ``loader.require_usable``) is a ``TraceLoadError``, one line. ``say``: where the
    lines go (default ``warn``; a worker process collects them for its parent)."""
    say = say or warn
    from neuron_profiler.trace.loader import TruncatedTraceWarning, require_usable

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = load()
        except BaseException:
            for w in caught:
                say(str(w.message))
            raise
    trace = trace_of(result) if trace_of else cast("Trace", result)
    require_usable(trace, trace.source)  # one line: the problem says what the warnings would
    for w in caught:
        say(str(w.message))
    report = trace.load_report
    if (trace.truncated or report.damage) and not any(
        issubclass(w.category, TruncatedTraceWarning) for w in caught
    ):
        what = report.damage or "file is truncated"
        say(
            f"{trace.source}: {what}; only complete events before the "
            f"{'damage' if report.damage else 'cut'} were kept"
        )
    if trace.skipped_events:
        n = trace.skipped_events
        say(f"{trace.source}: {n} event{'s' * (n != 1)} skipped (mistyped fields)")
    for line in report.lines(trace.source):
        say(line)
    return result


def main(argv: list[str] | None = None) -> int:
    with warnings.catch_warnings():  # restored on return: in-process callers keep their own
        warnings.showwarning = _showwarning
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, standalone_mode=False)
    except NeuronProfilerError as err:
        click.echo(f"neuron-prof: error: {err}", err=True)
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("neuron-prof: aborted", err=True)
        return 130
    except click.ClickException as err:
        err.show()
        return err.exit_code
    return 0


def console_main() -> None:
    """Console-script entry: exit with main()'s status, skipping the interpreter's teardown
    (``exit_now``)."""
    global _exiting
    _exiting = True
    exit_now(main())


_exiting = False  # this process ends through exit_now once main() returns
_left_for_exit: list[object] = []


def leave_for_exit(obj: object) -> None:
    """Keep ``obj`` until the process ends, where it ends through ``exit_now`` (the console
    script): freeing a large trace's Python objects one by one just before exiting is wasted
    work (~25 ms for a trace of 60,000 devices). In a process that goes on (``main`` called
    in-process) nothing is kept."""
    if _exiting:
        _left_for_exit.append(obj)


def exit_now(code: int) -> None:
    """End the process with ``code`` once the exit handlers have run and the output is
    flushed, without the interpreter's teardown: it frees every object one at a time, 60 ms
    after analysing a trace of 60,000 devices (4% of that command), memory the OS reclaims at
    once anyway. Output that cannot be flushed (a closed pipe: ``| head``) exits 120, as
    Python's own shutdown does."""
    atexit._run_exitfuncs()  # (logging's flush, a coverage tool's: what sys.exit would run)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream
            code = code or 120
    os._exit(code)


if __name__ == "__main__":
    console_main()
