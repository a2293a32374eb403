"""Build (once) and load the project's C++ extensions from torch's extension cache: the Kineto
bridge (collectors/_build.py) and the emulated device's memory extension
(emulator/device_allocator.py). Neither package imports the other for it.

An extension's name carries a hash of its sources, its build flags, the torch version and the
Python implementation and minor version (not the patch version: a patch release keeps the ABI),
so it is rebuilt only when one of those changes, and a cached build loads even where no compiler
is installed. A build says so in one line on stderr. When an extension can be neither loaded nor
built, ``CollectorUnavailableError`` names the problem in one line (torch, compiler, ninja,
headers, extension directory, compile error), the full compiler output kept beside the build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from neuron_profiler.errors import CollectorUnavailableError

ERROR_LOG = "neuron_build_error.log"  # full compiler output of a failed build, in its directory


def torch_paths() -> tuple[str, Path]:
    try:
        import torch
    except ImportError as err:
        raise CollectorUnavailableError(
            "profiling with NEURON needs torch (pip install 'neuron-profiler[torch]')"
        ) from err
    return torch.__version__, Path(torch.__file__).resolve().parent / "include"


def python_tag() -> str:
    """Implementation and major.minor (e.g. "cpython-3.11"): what the extension ABI depends on;
    a patch release of Python must not force a rebuild."""
    major, minor = sys.version_info[:2]
    return f"{sys.implementation.name}-{major}.{minor}"


def extension_name(prefix: str, files: list[Path], cflags: list[str]) -> str:
    """``prefix`` and a hash of ``files``' contents, ``cflags``, torch and Python's minor
    version: a cached build is reused exactly while none of them changes."""
    version, _ = torch_paths()
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    digest.update(" ".join(cflags + [version, python_tag()]).encode())
    return f"{prefix}_{digest.hexdigest()[:12]}"


def build_directory(name: str, what: str) -> Path:
    """torch's extension directory for ``name`` (created if missing); an unusable
    TORCH_EXTENSIONS_DIR (a file, read-only) is a CollectorUnavailableError, not a traceback."""
    from torch.utils.cpp_extension import _get_build_directory

    try:
        return Path(_get_build_directory(name, verbose=False))
    except OSError as err:
        where = err.filename or os.environ.get("TORCH_EXTENSIONS_DIR", "the extension directory")
        problem = (
            "not a directory"
            if isinstance(err, (NotADirectoryError, FileExistsError))
            else err.strerror or type(err).__name__
        )
        raise CollectorUnavailableError(
            f"cannot build {what}: cannot create {where} ({problem}; "
            "set TORCH_EXTENSIONS_DIR to a writable directory)"
        ) from err


def _cached_library(build_dir: Path, name: str) -> Path | None:
    for suffix in (".so", ".pyd"):
        lib = build_dir / f"{name}{suffix}"
        if lib.is_file():
            return lib
    return None


def _import_library(name: str, lib: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, lib)
    if spec is None or spec.loader is None:
        raise CollectorUnavailableError(f"{lib}: not a loadable Python extension")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (ImportError, OSError) as err:
        raise CollectorUnavailableError(
            f"{lib}: cached build does not load ({err}); delete it to rebuild"
        ) from err
    return module


def _compiler_problem(compiler: str) -> str | None:
    """Why ``compiler`` cannot be used (a sentence), or None when ``--version`` works: torch
    runs it the same way before building and would otherwise raise its own traceback."""
    if shutil.which(compiler) is None:
        return f"no C++ compiler: '{compiler}' not found on PATH (install g++ or set CXX)"
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return f"the C++ compiler '{compiler}' cannot be run ({err})"
    if done.returncode != 0:
        return (
            f"the C++ compiler '{compiler}' does not work ('{compiler} --version' exited "
            f"with status {done.returncode}; install g++ or set CXX)"
        )
    return None


def missing_build_prerequisite(include: Path, kineto: bool = True) -> str | None:
    """What a build here lacks (a sentence), or None when compiler, ninja and headers exist
    (Kineto's headers only when ``kineto``)."""
    compiler = os.environ.get("CXX", "c++")
    problem = _compiler_problem(compiler)
    if problem is not None:
        return problem
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        return "ninja not found (pip install ninja)"
    if not kineto:
        return None
    # torch's PrivateUse1 profiler registry header (torch >= 2.12) is used when present; the
    # bridge registers with Kineto directly without it (neuron_kineto.cpp, REGISTRATION).
    header = include / "kineto" / "IActivityProfiler.h"
    if not header.is_file():
        return f"torch headers missing: {header} (needs a torch built with Kineto)"
    return None


def load_extension(
    name: str,
    source: Path,
    notice: str,
    what: str,
    cflags: list[str],
    kineto: bool = True,
) -> ModuleType:
    """The extension ``name`` (from ``extension_name``) compiled from ``source``: loaded from
    torch's extension directory when built before (no compiler needed), else built there, saying
    ``notice`` on stderr, with ``cflags``. ``what`` names it in the CollectorUnavailableError raised when it can
    be neither loaded nor built; ``kineto``: it includes Kineto's headers."""
    _, include = torch_paths()
    build_dir = build_directory(name, what)
    lib = _cached_library(build_dir, name)
    if lib is not None:
        return _import_library(name, lib)
    problem = missing_build_prerequisite(include, kineto)
    if problem is None and not os.access(build_dir, os.W_OK | os.X_OK):
        problem = (
            f"{build_dir} is not writable and holds no cached build (set "
            "TORCH_EXTENSIONS_DIR to a writable directory)"
        )
    if problem is not None:
        raise CollectorUnavailableError(f"cannot build {what}: {problem}")
    from torch.utils.cpp_extension import load

    print(notice, file=sys.stderr, flush=True)
    try:
        return load(
            name=name,
            sources=[str(source)],
            extra_cflags=cflags,
            extra_include_paths=[str(include / "kineto")] if kineto else [],
            build_directory=str(build_dir),
            verbose=False,
        )
    except Exception as err:  # whatever the build raises is reported in one line
        raise CollectorUnavailableError(
            f"building {what} failed: {build_failure(err, build_dir)}"
        ) from err


def first_error_line(output: str) -> str | None:
    """The compiler's first diagnostic ("file:line:col: error: ..."), else ninja's "FAILED:"
    line, else None: the one line worth showing out of a build log."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for marker in ("error:", "FAILED:"):
        for line in lines:
            if marker in line:
                return line
    return None


def build_failure(err: BaseException, build_dir: Path) -> str:
    """One line describing a failed build; the full output goes to ``build_dir/ERROR_LOG``."""
    text = str(err).strip()
    line = first_error_line(text) or (text.splitlines()[-1] if text else type(err).__name__)
    if len(text.splitlines()) > 1:
        try:
            (build_dir / ERROR_LOG).write_text(text + "\n")
        except OSError:
            return line
        return f"{line} (full log: {build_dir / ERROR_LOG})"
    return line
