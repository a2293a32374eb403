"""Building the bridge: no manual step, cached (keyed without Python's patch version), one
line when it builds, and a clear error when a piece is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from neuron_profiler import cpp_extensions  # noqa: E402
from neuron_profiler.collectors import _build  # noqa: E402

PROBE = """
import sys
import neuron_profiler.collectors as c          # must import whatever happens
from neuron_profiler.trace import load_trace     # loading/analysis keep working
from neuron_profiler import NEURON               # a valid activity either way
import torch
assert NEURON == torch.profiler.ProfilerActivity.PrivateUse1
reason = c.unavailable_reason()
if reason is not None:
    print("ERROR:", reason)
    sys.exit(3)
print("OK")
"""


def _run(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )


def test_no_compiler_import_succeeds_and_names_the_problem(tmp_path: Path) -> None:
    out = _run({"TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")})
    assert out.returncode == 3, out.stderr
    assert "no C++ compiler" in out.stdout and "no-such-c++" in out.stdout
    assert out.stdout.count("\n") == 1  # one line
    assert _build.BUILDING_NOTICE not in out.stderr  # nothing was built


def test_cached_build_loads_without_a_compiler() -> None:
    _build.load_bridge()  # builds once (or finds this machine's cached build)
    lib_dir = cpp_extensions.build_directory(_build.module_name(), _build.WHAT)
    before = {p.name: p.stat().st_mtime_ns for p in lib_dir.glob("*.so")}
    out = _run({"CXX": "/nonexistent/c++"})
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout + out.stderr
    assert {p.name: p.stat().st_mtime_ns for p in lib_dir.glob("*.so")} == before  # no rebuild
    assert "building" not in out.stderr


def test_build_key_ignores_python_patch_version(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _build.module_name()
    major, minor = sys.version_info[:2]
    monkeypatch.setattr(sys, "version", f"{major}.{minor}.99 (another patch release)")
    monkeypatch.setattr(sys, "version_info", (major, minor, 99, "final", 0))
    assert _build.module_name() == name


def test_build_key_follows_python_minor_version_and_implementation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _build.module_name()
    major, minor = sys.version_info[:2]
    monkeypatch.setattr(sys, "version_info", (major, minor + 1, 0, "final", 0))
    other_minor = _build.module_name()
    monkeypatch.undo()
    monkeypatch.setattr(sys, "implementation", SimpleNamespace(name="pypy"))
    other_impl = _build.module_name()
    assert len({name, other_minor, other_impl}) == 3


def test_missing_ninja_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.cpp_extension as ext

    monkeypatch.setenv("CXX", sys.executable)  # any existing program stands in for a compiler
    monkeypatch.setattr(ext, "is_ninja_available", lambda: False)
    include = Path(ext.include_paths()[0])
    assert (
        cpp_extensions.missing_build_prerequisite(include) == "ninja not found (pip install ninja)"
    )


def test_missing_headers_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", sys.executable)
    problem = cpp_extensions.missing_build_prerequisite(tmp_path)
    assert problem is not None and "torch headers missing" in problem


def test_headers_without_the_registry_are_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", sys.executable)
    (tmp_path / "kineto").mkdir()
    (tmp_path / "kineto" / "IActivityProfiler.h").write_text("")
    assert (
        cpp_extensions.missing_build_prerequisite(tmp_path) is None
    )  # the bridge builds its fallback


FALLBACK_PROBE = """
import sys
from neuron_profiler import cpp_extensions
build = cpp_extensions.load_extension


def no_registry(name, source, notice, what, cflags, kineto=True):
    # the bridge the collector loads, built with -DNEURON_KINETO_NO_REGISTRY (cached in torch's
    # extension directory like the bridge itself, keyed by sources and flags)
    if source.name != "neuron_kineto.cpp":  # the emulator's memory extension
        return build(name, source, notice, what, cflags, kineto)
    flags = cflags + ["-DNEURON_KINETO_NO_REGISTRY"]
    files = [source, source.with_name("neuron_kineto.h")]
    name = cpp_extensions.extension_name("neuron_kineto_no_registry", files, flags)
    return build(name, source, "building the no-registry bridge", what, flags, kineto)


# before the collectors package is imported: importing it registers the bridge it loads
cpp_extensions.load_extension = no_registry
from neuron_profiler.collectors import _build

bridge = _build.load_bridge()  # the one registered at import
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile
x = torch.randn(16, 16, device="neuron:0")
with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
    (x @ x).sum().item()
prof.export_chrome_trace(sys.argv[1])
print(bridge.REGISTRATION)
"""


def test_registration_without_the_registry_header(tmp_path: Path) -> None:
    """The path a torch without PrivateUse1ProfilerRegistry takes (the bridge built with
    -DNEURON_KINETO_NO_REGISTRY): the factory goes to Kineto directly and device work is
    still traced and linked to its op. The variant is built once per source and flags and
    cached beside the bridge (rebuilding it every run cost ~50 s)."""
    import json

    trace = tmp_path / "trace.json"
    out = subprocess.run(
        [sys.executable, "-c", FALLBACK_PROBE, str(trace)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "libkineto registerProfilerFactory"
    events = json.loads(trace.read_text())["traceEvents"]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {k["name"] for k in kernels} >= {"TensorE: mm"}
    assert all(ops[k["args"]["External id"]] == k["args"]["op"] for k in kernels)


def test_the_collector_uses_torchs_registry_where_torch_has_it() -> None:
    assert _build.load_bridge().REGISTRATION == "torch PrivateUse1ProfilerRegistry"


def test_set_up_build_step_names_each_extension_it_cannot_build(tmp_path: Path) -> None:
    """scripts/build_extensions.py (the test command's set-up) without a compiler or a cached
    build: one line per extension naming the problem, and exit 0, so the suite still runs."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build_extensions.py"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-c++")}
    out = subprocess.run(
        [sys.executable, str(script), "--testing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stderr.splitlines())
    missing = f"no C++ compiler: '{tmp_path / 'no-c++'}' not found on PATH (install g++ or set CXX)"
    assert lines == [
        f"neuron-profiler: not built: the Kineto bridge's test module: cannot build the NEURON "
        f"Kineto collector: {missing}",
        f"neuron-profiler: not built: the Kineto bridge: cannot build the NEURON Kineto "
        f"collector: {missing}",
        f"neuron-profiler: not built: the emulator's memory extension: cannot build the "
        f"emulated device's memory extension: {missing}",
    ]
    assert not any(tmp_path.glob("**/*.so"))
