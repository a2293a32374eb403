"""The package root and the analysis/export side must stay torch-free (the CLI starts fast)."""

from __future__ import annotations

import subprocess
import sys

TORCH_FREE_MODULES = ["neuron_profiler", "neuron_profiler.trace", "neuron_profiler.cli.main",
                      "neuron_profiler.runtime_trace.format"]


def test_torch_free_imports() -> None:
    from neuron_profiler.cli.main import SUBCOMMANDS

    modules = TORCH_FREE_MODULES + [t.split(":")[0] for t in SUBCOMMANDS.values()]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_help_lists_subcommands() -> None:
    out = subprocess.run([sys.executable, "-m", "neuron_profiler.cli.main", "--help"],
                         capture_output=True, text=True, check=True)
    from neuron_profiler.cli.main import SUBCOMMANDS

    for name in SUBCOMMANDS:
        assert name in out.stdout
