"""``neuron-prof export`` / ``merge`` never lose or overwrite a file silently: an output that is an
input is refused before anything is loaded; an output that cannot be written (missing or
read-only directory, a directory, full disk, size limit) is one line, exit 2, no partial file,
and an existing output is left byte for byte as it was."""

from __future__ import annotations

import builtins
import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuron_profiler import output as _output
from neuron_profiler.cli.main import main
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.trace import load_trace

HOST_PID, TID = 4321, 777
OLD = b"previous output: must survive\n"
NOBODY = 65534


def host_events(n: int) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": HOST_PID,
            "tid": TID,
            "ts": 1000 + i * 10,
            "dur": 5,
            "args": {"External id": i + 1},
        }
        for i in range(n)
    ]


def write_host(path: Path, n: int = 20) -> Path:
    path.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": host_events(n)}))
    return path


def write_device(path: Path) -> Path:
    """One device execution inside the host span (system-trace JSON, as fetched)."""
    t = 10**18 + 1_000_000 + 20_000
    events = [
        {
            "event_type": F.NC_EXEC_RUNNING,
            "phase": phase,
            "tracking_id": 1,
            "nc_idx": 0,
            "thread_id": TID,
            "timestamp_ns": ts,
            "data": {},
        }
        for phase, ts in (("start", t), ("stop", t + 3_000))
    ]
    path.write_text(json.dumps({"events": events}))
    return path


def snapshot(*paths: Path) -> list[tuple[bytes, int]]:
    return [(p.read_bytes(), p.stat().st_mtime_ns) for p in paths]


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("neuron-prof: error: ")
    return lines[0]


@pytest.fixture()
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.chdir(tmp_path)
    return write_host(tmp_path / "h.json"), write_device(tmp_path / "d.json")


def test_the_fixtures_merge_and_export(
    inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    host, dev = inputs
    code, out, err = run_main(capsys, "merge", "h.json", "d.json", "-o", "m.json")
    assert code == 0 and err == "" and "merged 1 device activities" in out
    code, out, err = run_main(capsys, "export", "m.json", "-o", "m.pftrace")
    assert code == 0 and err == ""
    assert sorted(os.listdir()) == ["d.json", "h.json", "m.json", "m.pftrace"]


@pytest.mark.parametrize(
    "output",
    ["h.json", "./h.json", "ABSOLUTE", "soft.json", "hard.json", "sub/../h.json", "same.pftrace"],
)
def test_export_refuses_to_overwrite_its_input(
    inputs: tuple[Path, Path], output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host, _ = inputs
    Path("sub").mkdir()
    Path("soft.json").symlink_to(host.name)
    Path("hard.json").hardlink_to(host)
    source = "h.json"
    if output == "same.pftrace":  # a .pftrace output that is the input, whatever it holds
        source = shutil.copy(host, output)
    output = str(host) if output == "ABSOLUTE" else output
    before = snapshot(host, Path(source))
    code, out, err = run_main(capsys, "export", source, "-o", output)
    line = one_error_line(err)
    assert code == 2 and out == "" and "refusing to overwrite an input" in line
    assert line.startswith(f"neuron-prof: error: {Path(output)}: is the input {source};")
    assert snapshot(host, Path(source)) == before


def test_export_refuses_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broken input would fail to load: the refusal comes first, so loading never ran."""
    src = tmp_path / "broken.json"
    src.write_bytes(b"{not json")
    code, _, err = run_main(capsys, "export", str(src), "-o", str(src))
    assert code == 2 and "refusing to overwrite an input" in one_error_line(err)
    assert src.read_bytes() == b"{not json"


@pytest.mark.parametrize("which", ["host", "device", "second device", "device via link"])
@pytest.mark.parametrize("ext", [".json", ".json.gz"])
def test_merge_refuses_to_overwrite_an_input(
    inputs: tuple[Path, Path], which: str, ext: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host, dev = inputs
    host = host.rename("h" + ext)
    dev = dev.rename("d" + ext)
    dev2 = write_device(Path("d2" + ext))
    Path("link" + ext).symlink_to(dev.name)
    output = {
        "host": host.name,
        "device": dev.name,
        "second device": dev2.name,
        "device via link": "link" + ext,
    }[which]
    before = snapshot(host, dev, dev2)
    code, out, err = run_main(capsys, "merge", host.name, dev.name, dev2.name, "-o", output)
    line = one_error_line(err)
    assert code == 2 and out == "" and "refusing to overwrite an input" in line
    assert line.startswith(f"neuron-prof: error: {output}: ")
    assert snapshot(host, dev, dev2) == before


@pytest.mark.parametrize("command", ["export", "merge"])
@pytest.mark.parametrize(
    "output, problem",
    [
        ("missing/out.json", "no such directory: missing"),
        ("adir", "is a directory"),
        ("adir.json", "is a directory"),
        ("h.json/out.json", "not a directory: h.json"),
    ],
)
def test_unwritable_output_is_one_line_exit_2(
    inputs: tuple[Path, Path],
    command: str,
    output: str,
    problem: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    Path("adir").mkdir()
    Path("adir.json").mkdir()
    args = ["h.json"] + (["d.json"] if command == "merge" else [])
    before = sorted(os.listdir())
    code, out, err = run_main(capsys, command, *args, "-o", output)
    line = one_error_line(err)
    assert code == 2 and out == ""
    if output == "adir":  # no extension: the format is refused first
        assert "unsupported output format" in line
    else:
        assert line == f"neuron-prof: error: {output}: {problem}"
    assert sorted(os.listdir()) == before and os.listdir("adir") == []


class FullDisk:
    """The output file on a disk with ``room`` bytes left: ENOSPC on the write that overflows."""

    def __init__(self, real: object, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data: object) -> int:
        view = memoryview(data).cast("B")
        if len(view) > self.room:
            self.real.write(view[: self.room])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(view)
        return self.real.write(view)

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()


@pytest.mark.parametrize("command", ["export", "merge"])
@pytest.mark.parametrize("name", ["out.json", "out.json.gz", "out.pftrace"])
def test_full_disk_keeps_the_old_output(
    inputs: tuple[Path, Path],
    command: str,
    name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Path(name).write_bytes(OLD)
    before = sorted(os.listdir())
    monkeypatch.setattr(
        _output, "open", lambda fd, mode: FullDisk(builtins.open(fd, mode), 100), raising=False
    )
    args = ["h.json"] + (["d.json"] if command == "merge" else [])
    code, out, err = run_main(capsys, command, *args, "-o", name)
    assert code == 2
    assert one_error_line(err) == f"neuron-prof: error: {name}: no space left on device (disk full)"
    assert Path(name).read_bytes() == OLD and sorted(os.listdir()) == before


def _fsize_limit(limit: int) -> None:
    """preexec_fn: files may not grow past ``limit`` bytes; with SIGXFSZ ignored (inherited
    across exec) write() fails with EFBIG instead of the process being killed."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _cli(*args: str, cwd: Path, **kwargs: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


@pytest.mark.parametrize("command", ["export", "merge"])
@pytest.mark.parametrize("name", ["out.json", "out.json.gz", "out.pftrace"])
def test_file_size_limit_keeps_the_old_output(
    tmp_path: Path, command: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real EFBIG from write(2): the process's file size limit is below the output's size."""
    write_host(tmp_path / "h.json", n=3000)
    write_device(tmp_path / "d.json")
    (tmp_path / name).write_bytes(OLD)
    before = sorted(os.listdir(tmp_path))
    args = ["h.json"] + (["d.json"] if command == "merge" else [])
    res = _cli(command, *args, "-o", name, cwd=tmp_path, preexec_fn=lambda: _fsize_limit(4096))
    assert res.returncode == 2, res.stderr
    assert (
        one_error_line(res.stderr) == f"neuron-prof: error: {name}: file too large (the "
        "file size limit was reached)"
    )
    assert (tmp_path / name).read_bytes() == OLD and sorted(os.listdir(tmp_path)) == before
    with contextlib.chdir(tmp_path):  # no limit: the same command works (here, in-process)
        code, _, err = run_main(capsys, command, *args, "-o", name)
    assert code == 0, err
    assert name.endswith(".pftrace") or len(load_trace(tmp_path / name)) >= 3000


# --- as an unprivileged user: root ignores file permissions, so chmod alone proves nothing ---


def _setpriv() -> list[str]:
    tool = shutil.which("setpriv")
    if tool is None:
        reason = "setpriv (util-linux) not found: cannot run the CLI as an unprivileged user"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    if os.geteuid() != 0:
        return []  # already unprivileged
    return [tool, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="neuron-prof-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for sub in path.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(path)


def _as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(cwd)}
    return subprocess.run(
        [*_setpriv(), sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _check_unprivileged(path: Path) -> None:
    """The test proves something only if that user really cannot write ``path`` (appending
    changes nothing if it could)."""
    probe = _as_nobody("-c", f"open({str(path)!r}, 'a')", cwd=path.parent.parent)
    if "PermissionError" not in probe.stderr:
        pytest.fail(
            f"the unprivileged user could write {path} or could not run Python: "
            f"{probe.stderr.strip()[-300:]}"
        )


@pytest.mark.parametrize("command", ["export", "merge"])
@pytest.mark.parametrize("name", ["out.json", "out.json.gz", "out.pftrace"])
def test_read_only_directory(shared_dir: Path, command: str, name: str) -> None:
    write_host(shared_dir / "h.json")
    write_device(shared_dir / "d.json")
    ro = shared_dir / "ro"
    ro.mkdir()
    (ro / "old.json").write_bytes(OLD)
    ro.chmod(0o555)
    _check_unprivileged(ro / "probe")
    args = ["h.json"] + (["d.json"] if command == "merge" else [])
    for target in (f"ro/{name}", "ro/old.json"):
        before = sorted(os.listdir(ro))
        res = _as_nobody(
            "-m", "neuron_profiler.cli.main", command, *args, "-o", target, cwd=shared_dir
        )
        assert res.returncode == 2, res.stderr
        assert (
            one_error_line(res.stderr) == f"neuron-prof: error: {target}: permission "
            "denied (cannot create files in ro)"
        )
        assert sorted(os.listdir(ro)) == before and (ro / "old.json").read_bytes() == OLD


@pytest.mark.parametrize("command", ["export", "merge"])
def test_read_only_output_file_is_not_replaced(shared_dir: Path, command: str) -> None:
    """The directory is writable (a rename would succeed), the file is not: refused, kept."""
    write_host(shared_dir / "h.json")
    write_device(shared_dir / "d.json")
    rw = shared_dir / "rw"
    rw.mkdir()
    (rw / "old.json").write_bytes(OLD)
    (rw / "old.json").chmod(0o444)
    rw.chmod(0o777)
    _check_unprivileged(rw / "old.json")
    args = ["h.json"] + (["d.json"] if command == "merge" else [])
    res = _as_nobody(
        "-m", "neuron_profiler.cli.main", command, *args, "-o", "rw/old.json", cwd=shared_dir
    )
    assert res.returncode == 2, res.stderr
    assert (
        one_error_line(res.stderr) == "neuron-prof: error: rw/old.json: permission denied "
        "(the existing file is not writable)"
    )
    assert os.listdir(rw) == ["old.json"] and (rw / "old.json").read_bytes() == OLD
    assert stat.S_IMODE((rw / "old.json").stat().st_mode) == 0o444


def test_the_console_exit_runs_exit_handlers_and_flushes_output() -> None:
    """``exit_now`` skips the interpreter's teardown, not what a normal exit does: the exit
    handlers run, buffered output is written, the status is kept."""
    script = (
        "import atexit, sys\n"
        "from neuron_profiler.cli.main import exit_now\n"
        "atexit.register(lambda: sys.stdout.write('handler ran'))\n"
        "sys.stdout.write('buffered, ')\n"
        "sys.stderr.write('to stderr')\n"
        "exit_now(3)\n"
        "sys.stdout.write('never')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "buffered, handler ran", "to stderr")


def test_only_the_last_trace_is_left_for_the_console_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as the console script (which ends through ``exit_now``), ``analyze`` leaves the last
    file's trace for the process's end instead of freeing it; the traces before it are freed
    as usual (a run of many files holds one at a time), and ``main`` called in-process keeps
    nothing."""
    import weakref

    from neuron_profiler.analysis import Options
    from neuron_profiler.cli import main as cli_main
    from neuron_profiler.cli import workers
    from neuron_profiler.explorer import inputs

    files = []
    for k in range(3):
        event = {
            "ph": "X",
            "name": f"op{k}",
            "cat": "cpu_op",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 2,
        }
        path = tmp_path / f"t{k}.json"
        path.write_text(json.dumps({"traceEvents": [event]}))
        files.append((path, True))
    loaded: list[weakref.ref] = []
    load = inputs.load_input

    def watched(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        trace = load(*args, **kwargs)
        loaded.append(weakref.ref(trace))
        return trace

    monkeypatch.setattr(inputs, "load_input", watched)
    monkeypatch.setattr(cli_main, "_left_for_exit", [])
    results = workers.analyze_files(files, Options(), jobs=1)
    assert all(r.report is not None for r in results)
    assert [ref() for ref in loaded] == [None] * 3 and cli_main._left_for_exit == []
    monkeypatch.setattr(cli_main, "_exiting", True)
    loaded.clear()
    workers.analyze_files(files, Options(), jobs=1)
    assert [ref() is None for ref in loaded] == [True, True, False]
    assert cli_main._left_for_exit == [loaded[-1]()]
