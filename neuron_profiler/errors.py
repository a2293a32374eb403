"""The project's one error type: it carries the process exit code the CLI maps it to."""

from __future__ import annotations


class NeuronProfilerError(Exception):
    """An error meant for the user: a one-line message and an exit code."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class TraceLoadError(NeuronProfilerError):
    """A trace file holds nothing usable (missing, not JSON, not a trace, no complete event).
    ``not_a_trace``: the file is no trace at all (empty, not JSON, no ``traceEvents``), as a
    config file found beside traces is; a damaged trace is not that."""

    exit_code = 2

    def __init__(self, path: object, problem: str, *, not_a_trace: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.not_a_trace = not_a_trace


class CollectorUnavailableError(NeuronProfilerError):
    """Profiling with NEURON cannot work here (no C++ compiler, no torch, no runtime)."""

    exit_code = 3


class EmulatorError(NeuronProfilerError):
    """The emulated device cannot be enabled (a real neuron backend is registered) or cannot do
    what was asked of it (CUDA graphs, NCCL)."""

    exit_code = 3


class OutputError(NeuronProfilerError, OSError):
    """An output file cannot be written (or must not be: it is an input); nothing was changed.
    Also an ``OSError``, so callers of the writers that caught ``OSError`` still do."""

    exit_code = 2

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class MissingDependencyError(NeuronProfilerError):
    """An optional dependency that one input needs is not installed (the rest of the package
    works without it): the message names the file and what to install."""

    exit_code = 3

    def __init__(self, path: object, need: str, install: str) -> None:
        super().__init__(f"{path}: reading this needs {need} ({install})")
        self.path = path
