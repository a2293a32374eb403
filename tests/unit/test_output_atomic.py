"""Writers are atomic: a failed write (full disk, an error mid-export) leaves an existing output
exactly as it was and no temp file behind; a successful one replaces it whole."""

from __future__ import annotations

import builtins
import errno
import gzip
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuron_profiler import output as _output
from neuron_profiler.errors import NeuronProfilerError, OutputError
from neuron_profiler.exporters import perfetto as P
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace, TraceBuilder

T0 = 1_800_000_000_000_000_000
OLD = b"previous output: must survive a failed write\n"


def small_trace(n: int = 200) -> Trace:
    b = TraceBuilder("in.json")
    for i in range(n):
        b.add(
            name=f"op{i}",
            ts_ns=T0 + i * 1000,
            dur_ns=500,
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=1,
            tid=2,
            args={"External id": i, "pad": "x" * 40},
        )
    return b.build()


def write(trace: Trace, path: Path) -> Any:
    if path.name.endswith(".pftrace"):
        return write_perfetto_trace(trace, path)
    return write_chrome_trace(trace, path)


class FullDisk:
    """The writer's file object on a disk with ``room`` bytes left: the write that overflows
    stores what fits, then fails with ENOSPC, as write(2) does."""

    def __init__(self, real: Any, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) > self.room:
            self.real.write(view[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(view)
        return self.real.write(view)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()


def disk_with_room(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Every output file opened by ``_output`` from now on sits on a nearly full disk."""
    monkeypatch.setattr(
        _output, "open", lambda fd, mode: FullDisk(builtins.open(fd, mode), room), raising=False
    )


FORMATS = ["out.json", "out.json.gz", "out.pftrace"]


@pytest.mark.parametrize("name", FORMATS)
def test_full_disk_leaves_the_old_output_and_no_temp_file(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / name
    out.write_bytes(OLD)
    before = out.stat()
    disk_with_room(monkeypatch, 300)
    with pytest.raises(OutputError) as info:
        write(small_trace(), out)
    assert isinstance(info.value, OSError) and isinstance(info.value, NeuronProfilerError)
    assert info.value.exit_code == 2
    assert str(info.value) == f"{out}: no space left on device (disk full)"
    assert out.read_bytes() == OLD and out.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize("name", FORMATS)
def test_full_disk_with_no_old_output_leaves_nothing(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk_with_room(monkeypatch, 0)
    with pytest.raises(OutputError, match="disk full"):
        write(small_trace(), tmp_path / name)
    assert os.listdir(tmp_path) == []


def test_error_mid_perfetto_export_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not an OS error: it propagates unchanged, and the old .pftrace is not truncated."""
    out = tmp_path / "out.pftrace"
    out.write_bytes(OLD)

    def boom(*args: object) -> None:
        raise RuntimeError("encoder failed")

    monkeypatch.setattr(P, "_encode_packets", boom)
    with pytest.raises(RuntimeError, match="encoder failed"):
        write_perfetto_trace(small_trace(), out)
    assert out.read_bytes() == OLD and os.listdir(tmp_path) == ["out.pftrace"]


def test_error_mid_chrome_export_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json.gz"
    out.write_bytes(OLD)
    calls = []

    def progress(done: int) -> None:
        calls.append(done)
        raise KeyboardInterrupt  # interrupted after the first chunk was written

    with pytest.raises(KeyboardInterrupt):
        write_chrome_trace(small_trace(), out, progress=progress)
    assert calls and out.read_bytes() == OLD and os.listdir(tmp_path) == ["out.json.gz"]


@pytest.mark.parametrize("name", FORMATS)
def test_success_replaces_the_old_output_and_keeps_its_mode(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    out.write_bytes(OLD)
    out.chmod(0o640)
    write(small_trace(), out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == [name]
    if not name.endswith(".pftrace"):
        assert len(load_trace(out)) == 200


def test_new_file_gets_the_mode_open_would_give(tmp_path: Path) -> None:
    umask = os.umask(0o027)
    try:
        write_chrome_trace(small_trace(5), tmp_path / "new.json")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_gzip_header_names_the_output_not_the_temp_file(tmp_path: Path) -> None:
    out = tmp_path / "named.json.gz"
    write_chrome_trace(small_trace(5), out)
    raw = out.read_bytes()
    assert raw[3] & 0x08 and raw[10:].split(b"\0", 1)[0] == b"named.json"  # FNAME flag, name
    assert gzip.decompress(raw).startswith(b"{")


def test_a_symlinked_output_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(OLD)
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    write_chrome_trace(small_trace(5), link)
    assert link.is_symlink() and len(load_trace(real)) == 5
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


@pytest.mark.parametrize(
    "setup, problem",
    [
        (lambda d: d / "missing" / "out.json", "no such directory"),
        (lambda d: (d / "out.json").mkdir() or d / "out.json", "is a directory"),
        (lambda d: (d / "file").write_bytes(b"x") and d / "file" / "out.json", "not a directory"),
    ],
)
def test_unwritable_targets_fail_before_writing(
    tmp_path: Path, setup: Callable[[Path], Path], problem: str
) -> None:
    path = setup(tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(OutputError) as info:
        write_chrome_trace(small_trace(5), path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.EFBIG, "file too large"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
        (errno.EIO, "cannot write: Input/output error"),
    ],
)
def test_problem_names_the_cause(code: int, words: str) -> None:
    assert _output.problem(OSError(code, os.strerror(code))).startswith(words)


def test_check_output_refuses_an_input_by_any_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a.json"
    src.write_bytes(OLD)
    (tmp_path / "hard.json").hardlink_to(src)
    (tmp_path / "soft.json").symlink_to("a.json")
    monkeypatch.chdir(tmp_path)
    for out in ("a.json", "./a.json", str(src), "hard.json", "soft.json", "sub/../a.json"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(OutputError, match="refusing to overwrite an input"):
            _output.check_output(out, [Path("other.json"), src])
    _output.check_output("b.json", [src, Path("missing.json")])  # a new name is fine
