"""``neuron-prof``: the entry point. Subcommands live one per module and are imported lazily,
so ``neuron-prof --help`` and the analysis commands start without importing torch.

Errors: library code raises ``NeuronProfilerError`` (carrying an exit code); this module is the
one place that turns it into a one-line message and the process status.
"""

from __future__ import annotations

import importlib
import sys

import click

from neuron_profiler.errors import NeuronProfilerError

# subcommand name -> "module:attribute" of a click.Command
# Subcommand modules must not import torch at module level (``--help`` imports them all).
SUBCOMMANDS: dict[str, str] = {
    "demo": "neuron_profiler.cli.demo:demo",
    "export": "neuron_profiler.cli.export:export",
    "merge": "neuron_profiler.cli.merge:merge",
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


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":
    sys.exit(main())


def console_main() -> None:
    """Console-script entry: exit with main()'s status."""
    sys.exit(main())
