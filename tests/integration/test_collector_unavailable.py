"""When the NEURON bridge cannot be built, profiling with NEURON still records CPU events, warns
once per profile start naming the problem and puts the problem in the trace metadata, and
``neuron-prof demo`` exits with one ``neuron-prof: error: ...`` line, never a traceback.

Every case runs in a subprocess with its own empty TORCH_EXTENSIONS_DIR, so it never reuses (or
spoils) the real cached build. The read-only case runs as an unprivileged user: root may write
into a chmod 555 directory, so under root only a dropped uid proves anything.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.collectors import META_UNAVAILABLE  # noqa: E402
from neuron_profiler.collectors._build import BUILDING_NOTICE  # noqa: E402

pytestmark = [pytest.mark.torch]

NOBODY = 65534

PROFILE = r"""
import json, os, sys, warnings
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from neuron_profiler import NEURON
from neuron_profiler.collectors import CollectorUnavailableWarning, unavailable_reason

out = sys.argv[1]
cycles = []


def ready(prof):
    prof.export_chrome_trace(f"{out}/cycle{len(cycles)}.json")
    cycles.append(1)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for i in range(2):  # two profiles: one warning each
        with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
            torch.ones(4, 4) @ torch.ones(4, 4)
        prof.export_chrome_trace(f"{out}/plain{i}.json")
    # one profile with two recording cycles: one warning, the reason in both traces
    with profile(activities=[ProfilerActivity.CPU, NEURON], on_trace_ready=ready,
                 schedule=schedule(wait=1, warmup=1, active=1, repeat=2)) as prof:
        for _ in range(6):
            torch.ones(4, 4) @ torch.ones(4, 4)
            prof.step()
    with profile(activities=[ProfilerActivity.CPU]):  # did not ask for NEURON: no warning
        torch.ones(4, 4) @ torch.ones(4, 4)
ours = [w for w in caught if issubclass(w.category, CollectorUnavailableWarning)]
print(json.dumps({"reason": unavailable_reason(),
                  "warnings": [[str(w.message), w.filename] for w in ours],
                  "cycles": len(cycles),
                  "extensions_writable": os.access(os.environ["TORCH_EXTENSIONS_DIR"], os.W_OK)}))
"""

# the demo through its entry point (``python -m neuron_profiler.cli.main``), after the premise
# of an unprivileged case (``_check_premise``) in the same interpreter: one torch start, not two
DEMO = r"""
import os, runpy, sys
print(os.access(os.environ["TORCH_EXTENSIONS_DIR"], os.W_OK), flush=True)
sys.argv = ["neuron_profiler.cli.main", *sys.argv[1:]]
runpy.run_module("neuron_profiler.cli.main", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Case:
    """One way the build fails: extra environment, how to run, what the one line must say."""

    env: dict[str, str]
    expect: str
    unprivileged: bool = False


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEURON_PROFILER_", "TORCH_EXTENSIONS_DIR", "CXX"))
    }
    return {**env, **extra}


def _as_unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` run as an unprivileged user: as is when we are not root, else through setpriv
    (skip when it is missing; CI runs as root and must run these, so fail there)."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        reason = "setpriv not found: cannot drop root to test a read-only extension directory"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary directory the unprivileged user can enter (pytest's tmp_path is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="neuron-prof-unavailable-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _make_case(name: str, tmp: Path) -> Case:
    ext = tmp / "ext"
    if name == "no-compiler":
        ext.mkdir()
        return Case(
            {"TORCH_EXTENSIONS_DIR": str(ext), "CXX": str(tmp / "no-such-c++")},
            "no C++ compiler: '" + str(tmp / "no-such-c++") + "' not found",
        )
    if name == "compiler-fails":
        ext.mkdir()
        return Case(
            {"TORCH_EXTENSIONS_DIR": str(ext), "CXX": "/bin/false"},
            "'/bin/false --version' exited with status 1",
        )
    if name == "source-fails":
        real = shutil.which("c++") or shutil.which("g++")
        if real is None:
            pytest.skip("no C++ compiler to fail on the source")
        ext.mkdir()
        (tmp / "broken.h").write_text("#error simulated failure in the bridge source\n")
        # a real compiler; every compile hits the #error first, and -Wfatal-errors stops it
        # there instead of parsing torch's headers after it (~20 s a build for nothing)
        wrapper = tmp / "failing-g++"
        wrapper.write_text(
            f'#!/bin/sh\nfor a in "$@"; do [ "$a" = "-c" ] && exec {real} -Wfatal-errors '
            f'-include {tmp / "broken.h"} "$@"; done\nexec {real} "$@"\n'
        )
        wrapper.chmod(0o755)
        return Case(
            {"TORCH_EXTENSIONS_DIR": str(ext), "CXX": str(wrapper)},
            "error: #error simulated failure in the bridge source",
        )
    if name == "read-only-dir":
        ext.mkdir()
        ext.chmod(
            stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
        )
        return Case(
            {"TORCH_EXTENSIONS_DIR": str(ext)},
            f"cannot create {ext}/neuron_profiler_kineto_",
            unprivileged=True,
        )
    if name == "dir-is-a-file":
        ext.write_text("not a directory\n")
        return Case(
            {"TORCH_EXTENSIONS_DIR": str(ext)}, f"cannot create {ext}/neuron_profiler_kineto_"
        )
    raise AssertionError(name)


CASES = ["no-compiler", "compiler-fails", "source-fails", "read-only-dir", "dir-is-a-file"]
DETAIL = {"read-only-dir": "Permission denied", "dir-is-a-file": "not a directory"}


def _run(case: Case, args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, *args]
    env = _env(case.env)
    if case.unprivileged:
        cmd = _as_unprivileged(cmd)
        env["HOME"] = str(tmp / "home")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp)


def _writable_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)  # the unprivileged user writes here
    return path


def _check_premise(case: Case, proc: subprocess.CompletedProcess[str], writable: str) -> None:
    """For an unprivileged case: the user ran this Python (``proc``, which printed whether the
    extension directory was ``writable`` for it, "True" or "False") and really could not write
    the extension directory (a root that kept its privileges would prove nothing)."""
    if not case.unprivileged:
        return
    assert writable in ("True", "False"), (
        f"the unprivileged user cannot run {sys.executable}: {proc.stderr[-500:]}"
    )
    assert writable == "False", "extension directory writable: privileges kept"


@pytest.mark.parametrize("name", CASES)
def test_profile_warns_once_per_start_and_the_trace_says_why(name: str, shared_tmp: Path) -> None:
    case = _make_case(name, shared_tmp)
    out = _writable_dir(shared_tmp / "out")
    _writable_dir(shared_tmp / "home")
    script = shared_tmp / "profile_probe.py"
    script.write_text(PROFILE)
    script.chmod(0o644)
    proc = _run(case, [str(script), str(out)], shared_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    _check_premise(case, proc, str(result["extensions_writable"]))
    reason = result["reason"]
    assert case.expect in reason and DETAIL.get(name, "") in reason
    assert "\n" not in reason
    # one warning per profile start (two plain profiles, one scheduled one; none for CPU-only)
    assert len(result["warnings"]) == 3
    for message, filename in result["warnings"]:
        assert message.endswith(reason) and "device events unavailable" in message
        assert filename == str(script)  # points at the user's code, not torch's
    assert result["cycles"] == 2
    for trace_file in ["plain0.json", "plain1.json", "cycle0.json", "cycle1.json"]:
        trace = json.loads((out / trace_file).read_text())
        assert trace[META_UNAVAILABLE] == reason
        names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert "aten::mm" in names  # CPU events are still recorded


@pytest.mark.parametrize("name", CASES)
def test_demo_exits_with_one_error_line(name: str, shared_tmp: Path) -> None:
    case = _make_case(name, shared_tmp)
    _writable_dir(shared_tmp / "home")
    out_dir = shared_tmp / "home" / "demo"
    demo = ["demo", "-o", str(out_dir), "--steps", "1"]
    entry = ["-c", DEMO] if case.unprivileged else ["-m", "neuron_profiler.cli.main"]
    proc = _run(case, [*entry, *demo], shared_tmp)
    if case.unprivileged:
        _check_premise(case, proc, proc.stdout.split("\n", 1)[0])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("neuron-prof: error: ")]
    assert len(errors) == 1, proc.stderr
    assert case.expect in errors[0] and DETAIL.get(name, "") in errors[0]
    assert set(lines) - {BUILDING_NOTICE} == set(errors), proc.stderr  # nothing else
    assert (BUILDING_NOTICE in lines) == (name == "source-fails")  # only a real build says so
    assert not out_dir.exists()
