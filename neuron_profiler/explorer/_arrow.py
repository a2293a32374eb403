"""pyarrow, imported only when a Parquet file is read: it is the optional ``explorer`` extra."""

from __future__ import annotations

from types import ModuleType

from neuron_profiler.errors import MissingDependencyError

INSTALL_HINT = "pip install 'neuron-profiler[explorer]'"


def require_pyarrow(path: object) -> tuple[ModuleType, ModuleType, ModuleType]:
    """(pyarrow, pyarrow.compute, pyarrow.parquet), or ``MissingDependencyError`` naming
    ``path`` and what to install."""
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError:
        raise MissingDependencyError(path, "pyarrow", INSTALL_HINT) from None
    return pyarrow, pyarrow.compute, pyarrow.parquet
