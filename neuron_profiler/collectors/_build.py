"""Build (once) and load the C++ Kineto bridge, with no manual step::

    bridge = load_bridge()          # cached: the first call compiles (~30 s), later ones load

The compiled module lives in torch's extension directory under a name carrying a hash of the
source, the build flags and the torch version, so it is rebuilt only when one of those changes,
and a cached build loads even where no compiler is installed. When it cannot be built, this
raises ``CollectorUnavailableError`` naming the missing piece (torch, compiler, ninja, headers).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from neuron_profiler.errors import CollectorUnavailableError

SOURCE = Path(__file__).resolve().parent / "_kineto" / "neuron_kineto.cpp"
EXTRA_CFLAGS = ["-O2", "-DUSE_KINETO", "-DFMT_HEADER_ONLY"]
_NAME_PREFIX = "neuron_profiler_kineto"
_loaded: ModuleType | None = None


def _torch_paths() -> tuple[str, Path]:
    try:
        import torch
    except ImportError as err:
        raise CollectorUnavailableError(
            "profiling with NEURON needs torch (pip install 'neuron-profiler[torch]')") from err
    return torch.__version__, Path(torch.__file__).resolve().parent / "include"


def module_name() -> str:
    """Extension name: changes whenever the source, flags or torch version change."""
    version, _ = _torch_paths()
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join(EXTRA_CFLAGS + [version, sys.version]).encode())
    return f"{_NAME_PREFIX}_{digest.hexdigest()[:12]}"


def build_directory(name: str) -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(name, verbose=False))


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
    spec.loader.exec_module(module)
    return module


def missing_build_prerequisite(include: Path) -> str | None:
    """What a build here lacks (a sentence), or None when compiler, ninja and headers exist."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: '{compiler}' not found on PATH (install g++ or set CXX)"
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        return "ninja not found (pip install ninja)"
    for header in (include / "kineto" / "IActivityProfiler.h",
                   include / "torch/csrc/profiler/standalone/privateuse1_profiler.h"):
        if not header.is_file():
            return f"torch headers missing: {header} (needs torch >= 2.12 with Kineto headers)"
    return None


def load_bridge() -> ModuleType:
    """The bridge module, compiled on first use and cached; raises CollectorUnavailableError."""
    global _loaded
    if _loaded is not None:
        return _loaded
    _, include = _torch_paths()
    name = module_name()
    build_dir = build_directory(name)
    lib = _cached_library(build_dir, name)
    if lib is not None:
        _loaded = _import_library(name, lib)
        return _loaded
    problem = missing_build_prerequisite(include)
    if problem is not None:
        raise CollectorUnavailableError(f"cannot build the NEURON Kineto collector: {problem}")
    from torch.utils.cpp_extension import load

    try:
        _loaded = load(name=name, sources=[str(SOURCE)], extra_cflags=EXTRA_CFLAGS,
                       extra_include_paths=[str(include / "kineto")],
                       build_directory=str(build_dir), verbose=False)
    except (RuntimeError, OSError, ImportError) as err:
        last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise CollectorUnavailableError(
            f"building the NEURON Kineto collector ({SOURCE}) failed: {last}") from err
    return _loaded
