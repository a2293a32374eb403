"""What a path given to ``neuron-prof`` holds, and how to load it as one trace::

    kind = input_kind(path)            # TRACE, EXPLORER or NATIVE
    trace = load_input(path, say=warn) # any of them, as a Trace
    found = traces_under(directory)    # what a directory given to analyze or diff holds

- EXPLORER: a Neuron Explorer profile directory, one of its Parquet tables, or its legacy
  ``system_profile.json``. Loaded with the torch.profiler trace that sits beside it (a
  ``*.pt.trace.json[.gz]`` in the profile's directory or the one above) merged in, else alone.
- NATIVE: AWS's native PyTorch output directory (``native``): its framework trace (one rank).
- TRACE: anything else, for the trace loader.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.explorer import schema as X
from neuron_profiler.explorer.native import is_native_dir, read_native
from neuron_profiler.explorer.reader import is_profile_dir, table_files
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

HOST_TRACE_SUFFIXES = V.TORCH_TRACE_SUFFIXES
JSON_SUFFIXES = (".json", ".json.gz")  # files under a directory that may be traces
NO_TRACE_FILE = "no *.json or *.json.gz file in this directory"


class InputKind(enum.Enum):
    TRACE = "trace"
    EXPLORER = "explorer"
    NATIVE = "native"


def input_kind(path: Path) -> InputKind:
    if path.is_dir():
        if is_profile_dir(path):
            return InputKind.EXPLORER
        if is_native_dir(path):
            return InputKind.NATIVE
        return InputKind.TRACE
    if path.name.endswith(X.PARQUET_SUFFIX) or path.name == X.LEGACY_FILE:
        return InputKind.EXPLORER
    return InputKind.TRACE


def host_trace_beside(profile: Path) -> Path | None:
    """The torch.profiler trace next to a profile: in its directory, else the one above."""
    where = profile if profile.is_dir() else profile.parent
    for d in (where, where.parent):
        found = sorted(
            f for f in d.iterdir() if f.is_file() and f.name.endswith(HOST_TRACE_SUFFIXES)
        )
        if found:
            return found[0]
    return None


def profile_beside(host: Path) -> Path | None:
    """The Explorer profile that goes with a torch.profiler trace, paired as
    ``host_trace_beside`` pairs them: a profile directory next to the trace whose host trace is
    this one (None: none, or more than one)."""
    found = [
        d
        for d in sorted(host.parent.iterdir())
        if d.is_dir() and is_profile_dir(d) and host_trace_beside(d) == host
    ]
    return found[0] if len(found) == 1 else None


def load_host_trace(path: Path) -> Trace:
    """A torch.profiler trace, with the Explorer profile beside it merged in when there is one:
    what the TensorBoard plugin shows for a trace file it lists. A trace with nothing usable
    is a ``TraceLoadError``, as for every command (``loader.require_usable``)."""
    from neuron_profiler.trace.loader import load_trace, require_usable

    profile = profile_beside(path)
    trace = load_explorer(profile, path).trace if profile is not None else load_trace(path)
    return require_usable(trace, path)


def explorer_profiles_under(root: Path) -> list[Path]:
    """Every Explorer profile directory under ``root`` (several ranks' profiles at once)."""
    dirs = {f.parent for f in root.rglob(f"{X.EVENTS}*{X.PARQUET_SUFFIX}")}
    dirs |= {f.parent.parent for f in root.rglob(f"{X.EVENTS}/*{X.PARQUET_SUFFIX}")}
    dirs |= {f.parent for f in root.rglob(X.LEGACY_FILE)}
    return sorted(d for d in dirs if table_files(d).get(X.EVENTS) or (d / X.LEGACY_FILE).is_file())


def traces_under(directory: Path) -> tuple[list[Path], list[Path]]:
    """What a directory holds for ``analyze`` and ``diff``, in name order: the JSON files that
    may be traces (``*.json[.gz]``; which ones are is the loader's call), and the Explorer
    profiles under it (each one input, merged with the host trace beside it: neither the
    profile's own files nor that host trace are listed among the files)."""
    profiles = explorer_profiles_under(directory)
    beside = {host_trace_beside(d) for d in profiles}
    files = sorted(
        f
        for f in directory.rglob("*")
        if f.is_file()
        and f.name.endswith(JSON_SUFFIXES)
        and f not in beside
        and not any(f.is_relative_to(d) for d in profiles)
    )
    return files, profiles


def load_input(
    path: Path, say: Callable[[str], None] | None = None, *, beside: bool = True
) -> Trace:
    """``path`` as one trace (see the module docstring); ``say``: where skip lines go;
    ``beside=False``: an Explorer profile on its own even when a host trace sits beside it."""
    kind = input_kind(path)
    if kind is InputKind.EXPLORER:
        return load_explorer(path, host_trace_beside(path) if beside else None).trace
    if kind is InputKind.NATIVE:
        native = read_native(path)
        for line in native.skipped:
            (say or (lambda _: None))(line)
        if len(native.traces) != 1:
            raise TraceLoadError(
                path, f"{len(native.traces)} framework traces (ranks): name one of them"
            )
        path = next(iter(native.traces.values()))
    from neuron_profiler.trace import load_trace

    return load_trace(path)


def load_explorer(path: Path, host: Path | None):  # noqa: ANN201 - an ExplorerResult
    """An Explorer profile on the host trace ``host`` (None: on its own)."""
    from neuron_profiler.explorer.profile_trace import merge_profile, profile_trace
    from neuron_profiler.explorer.reader import read_profile

    profile = read_profile(path)
    if host is None:
        return profile_trace(profile)
    from neuron_profiler.trace import load_trace

    return merge_profile(load_trace(host), profile)
