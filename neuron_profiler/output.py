"""Safe output files: every writer (the trace exporters, the HTML report) goes through
``atomic_output`` so a failed or interrupted write never truncates or half-writes its target, and
the CLI calls ``check_output`` before loading anything so an output that is one of the inputs (or
cannot be written) is refused up front.

    with atomic_output(path, gzip_level=6) as out:   # a temp file beside ``path``
        out.write(data)                               # renamed over ``path`` only on success

Failures are ``OutputError`` (exit code 2, also an ``OSError``) naming the path and the problem.
"""

from __future__ import annotations

import errno
import gzip
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from neuron_profiler.errors import OutputError

_PROBLEMS = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EFBIG: "file too large (the file size limit was reached)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "is a directory",
    errno.ENAMETOOLONG: "file name too long",
}
_NAME_KEEP = 200  # of the target's name in the temp file's name (NAME_MAX is 255)


def problem(err: OSError) -> str:
    """A short description of why a write failed, saying plainly when the disk is full."""
    if err.errno in _PROBLEMS:
        return _PROBLEMS[err.errno]
    return f"cannot write: {err.strerror or err}"


def check_output(path: str | Path, inputs: Sequence[str | Path] = ()) -> None:
    """Refuse, before any work, an output that is one of ``inputs`` (same file by device and
    inode: symlinks, hard links and other spellings count) or that cannot be written."""
    path = Path(path)
    for source in inputs:
        if same_file(path, Path(source)):
            raise OutputError(
                path,
                f"is the input {source}; refusing to overwrite an input "
                "(choose another output file)",
            )
    _writable(path, _target(path))


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (device and inode); False when either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # either missing: not the same (an unreadable input is reported on reading)
        return False


def _target(path: Path) -> Path:
    """The file a write replaces: through a symlink, so the link stays a link."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _writable(path: Path, target: Path) -> None:
    """Raise ``OutputError`` for problems knowable before writing: a missing or unwritable
    directory, a directory or special file in the way, a read-only existing file."""
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(
            path,
            f"no such directory: {parent}" if not parent.exists() else f"not a directory: {parent}",
        )
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise OutputError(path, problem(err)) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(path, "is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(path, "not a regular file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(path, f"permission denied (cannot create files in {parent})")
    if mode is not None and not os.access(target, os.W_OK):
        raise OutputError(path, "permission denied (the existing file is not writable)")


def _create_temp(target: Path) -> tuple[int, Path]:
    """A new file beside ``target`` (same file system, so the rename is atomic), created with
    the mode a plain ``open`` would give (0o666 less the umask)."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name[:_NAME_KEEP]}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target.parent))


@contextmanager
def atomic_output(path: str | Path, *, gzip_level: int | None = None) -> Iterator[IO[bytes]]:
    """A binary file (gzip-compressed with ``gzip_level``) that replaces ``path`` only when the
    block completes; on any failure the temp file is removed and ``path`` is left as it was.
    OS errors become ``OutputError`` naming ``path``."""
    path = Path(path)
    target = _target(path)
    _writable(path, target)
    try:
        fd, tmp = _create_temp(target)
    except OSError as err:
        raise OutputError(path, problem(err)) from None
    try:
        with open(fd, "wb") as raw:
            if gzip_level is None:
                yield raw
            else:  # the header names the target (as gzip.open(path) would), not the temp file
                with gzip.GzipFile(
                    filename=target.name, mode="wb", compresslevel=gzip_level, fileobj=raw
                ) as out:
                    yield out
            raw.flush()
            os.fsync(raw.fileno())  # a full disk can surface only here; before the rename
        with suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))  # replacing keeps the mode
        os.replace(tmp, target)
    except BaseException as err:
        with suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, OutputError):
            raise OutputError(path, problem(err)) from None
        raise
