"""AWS's native PyTorch profiling output (``torch.profiler`` with a ``NeuronConfig``): a directory
with the framework trace of each rank (``neuron_framework_trace_rank_<N>.json``) beside the
runtime's binary files (``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``,
``*.ntff``, ``*.neff``).

The framework trace is read as a torch.profiler trace (ASSUMPTION: Chrome trace JSON, as
``torch.profiler`` exports). The binary files' formats are not public: each one is named in one
line saying it was skipped and why; none is ever a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FRAMEWORK_TRACE = re.compile(r"^neuron_framework_trace_rank_(\d+)\.json(\.gz)?$")
BINARY_SUFFIXES = (".pb", ".ntff", ".neff")
WHY_SKIPPED = "its format is not public (Neuron Explorer reads it; this project cannot)"


@dataclass(frozen=True)
class NativeOutput:
    """Framework traces by rank, and the binary files skipped (one line each)."""

    traces: dict[int, Path]
    skipped: list[str]


def is_native_dir(path: Path) -> bool:
    return path.is_dir() and any(FRAMEWORK_TRACE.match(f.name) for f in path.iterdir())


def read_native(path: Path) -> NativeOutput:
    """The framework traces under ``path`` (and its subdirectories), and a line per binary file."""
    traces: dict[int, Path] = {}
    skipped = []
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        m = FRAMEWORK_TRACE.match(f.name)
        if m:
            traces.setdefault(int(m.group(1)), f)
        elif f.name.endswith(BINARY_SUFFIXES):
            skipped.append(f"{f}: skipped, {WHY_SKIPPED}")
    return NativeOutput(dict(sorted(traces.items())), skipped)
