"""Build (once) and load the C++ Kineto bridge, with no manual step::

    bridge = load_bridge()          # cached: the first call compiles (~15 s), later ones load
    testing = load_testing_bridge() # the test and bench entry points, a module of their own

The build and the cache are ``neuron_profiler.cpp_extensions``' (the sources hashed here are the
module's .cpp and the shared header). A loaded module's record layout is checked against
``runtime_trace.records.RECORD``; when it cannot be built, loaded or its layout differs, this
raises ``CollectorUnavailableError`` with one line naming the problem.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType
from typing import Any

from neuron_profiler.cpp_extensions import extension_name, load_extension
from neuron_profiler.errors import CollectorUnavailableError

_KINETO = Path(__file__).resolve().parent / "_kineto"
HEADER = _KINETO / "neuron_kineto.h"  # the core, compiled into both modules
SOURCE = _KINETO / "neuron_kineto.cpp"  # the collector's module
TESTING_SOURCE = _KINETO / "neuron_kineto_testing.cpp"  # test and bench entry points
EXTRA_CFLAGS = ["-O2", "-DUSE_KINETO", "-DFMT_HEADER_ONLY"]
_NAME_PREFIX = "neuron_profiler_kineto"
_TESTING_NAME_PREFIX = "neuron_profiler_kineto_testing"
BUILDING_NOTICE = "neuron-profiler: building the NEURON Kineto bridge (first use, about 30 s)..."
TESTING_NOTICE = (
    "neuron-profiler: building the Kineto bridge's test and bench module (first use, about 30 s)..."
)
WHAT = "the NEURON Kineto collector"  # how errors name it
_loaded: dict[bool, ModuleType] = {}  # testing? -> module


def module_name(testing: bool = False) -> str:
    """Extension name: changes whenever a source file it compiles (its .cpp, the header), the
    flags, torch or Python's minor version change."""
    prefix = _TESTING_NAME_PREFIX if testing else _NAME_PREFIX
    return extension_name(prefix, [TESTING_SOURCE if testing else SOURCE, HEADER], EXTRA_CFLAGS)


def load_bridge() -> ModuleType:
    """The bridge module, compiled on first use and cached; raises CollectorUnavailableError."""
    return _loaded.get(False) or _load(testing=False)


def load_testing_bridge() -> ModuleType:
    """The test and bench module (``convert_records``, ``render_seconds``, the correlation
    stack's hooks): the same core, built on first use under its own name, with the arg keys
    the collector registers."""
    if True not in _loaded:
        from neuron_profiler.collectors.session import ARG_KEYS

        _load(testing=True).set_keys(ARG_KEYS)
    return _loaded[True]


def _load(testing: bool) -> ModuleType:
    name = module_name(testing)
    source = TESTING_SOURCE if testing else SOURCE
    notice = TESTING_NOTICE if testing else BUILDING_NOTICE
    module = load_extension(name, source, notice, WHAT, EXTRA_CFLAGS)
    problem = layout_mismatch(module.record_dtype())
    if problem is not None:
        raise CollectorUnavailableError(
            f"the NEURON Kineto bridge ({name}) does not match "
            f"runtime_trace.records.RECORD: {problem}"
        )
    _loaded[testing] = module
    return module


def layout_mismatch(bridge_dtype: Any) -> str | None:
    """The first difference between the bridge's ``struct Record`` (as a numpy dtype) and
    ``RECORD`` (a phrase), or None when they agree field for field (name, offset, type) and in
    size."""
    from neuron_profiler.runtime_trace.records import RECORD

    if bridge_dtype == RECORD:
        return None

    def fields(dt: Any) -> list[str]:
        return [f"{n} at {dt.fields[n][1]} ({dt.fields[n][0]})" for n in dt.names or ()]

    for theirs, ours in itertools.zip_longest(fields(bridge_dtype), fields(RECORD)):
        if theirs != ours:
            return f"the bridge has {theirs or 'nothing'} where RECORD has {ours or 'nothing'}"
    return f"the bridge's records are {bridge_dtype.itemsize} bytes, RECORD's {RECORD.itemsize}"
