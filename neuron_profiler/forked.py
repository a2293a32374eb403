"""One call run in a forked child process, its result sent back pickled: work for the second
core, where a process has two and runs one thread.

The loader decodes the second half of a large trace in a child while this process decodes the
first half (``trace/loader.py``); ``analyze`` computes the HTA and tb-profiler breakdowns and
the op and kernel summary of a large trace in a child while this process computes the rest
(``analysis/report.py``). Forking (not spawning) matters: the child starts in milliseconds with
every module already imported, the trace already in memory and the file's pages cached.
``NEURON_PROFILER_FORK=0`` turns every such child off (the work is then done here, in turn).

    child = ForkedCall.start(decode_rest, path, offset)   # None where forking is not safe
    result = child.result()                               # None if the child failed

The result's large buffers (numpy arrays: pickle protocol 5's out-of-band buffers) go through
an anonymous in-memory file (``memfd``) made before the fork: the child writes them there once,
this process maps them and rebuilds the arrays on the mapping, without copying them. Only the
rest of the pickle goes through the pipe. (Through the pipe alone, 63 MB of a trace's columns
and args took ~0.1 s after the child was done: pickled, copied through the kernel 64 kB at a
time, unpickled into fresh pages.) Where ``memfd_create`` is missing, everything goes through
the pipe.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_PICKLE_PROTOCOL = 5  # numpy arrays go as one buffer each, not copied element by element
_FAILED = b"\x00"  # the child's first byte when its call raised (then nothing follows)
_DONE = b"\x01"  # ... when the pickled result follows in the pipe
_DONE_MAPPED = b"\x02"  # ... when the pickle follows, its buffers in the memfd
FORK_ENV = "NEURON_PROFILER_FORK"
_OFF = ("0", "off", "no", "false")
_PR_SET_PDEATHSIG = 1  # (linux/prctl.h)


def fork_is_safe() -> bool:
    """Forking copies only the calling thread: with other threads running, a lock one of them
    holds (the import lock, a buffered stream's) would stay held forever in the child. So only a
    single-threaded process on Linux forks (macOS forbids much after fork; Windows has none),
    and not a pool's worker process (its siblings use the other cores already); never when
    ``NEURON_PROFILER_FORK`` is ``0`` (or off, no, false)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if setting_off(os.environ.get(FORK_ENV, "")):
        return False
    if threading.active_count() != 1:
        return False
    # a pool's worker has imported multiprocessing (its start ran through it): a process that
    # has not cannot be one, and importing it just to ask costs 2-3 ms of a small load
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or multiprocessing.parent_process() is None


def setting_off(value: str) -> bool:
    """Does an environment setting say off (``0``, ``off``, ``no``, ``false``, any case)?"""
    return value.strip().lower() in _OFF


def usable_cores() -> int:
    """The cores this process may run on (a child only helps where there are two)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux: fork_is_safe says no there anyway)
        return os.cpu_count() or 1


class ForkedCall:
    """A child process running one call; ``result()`` waits for it and reaps it."""

    def __init__(self, pid: int, read_fd: int, memfd: int | None) -> None:
        self._pid = pid
        self._read = os.fdopen(read_fd, "rb")
        self._memfd = memfd
        self._reaped = False
        self._value: Any | None = None
        # the result is read and unpickled as it comes, while the caller works on: reading the
        # pipe releases the GIL, and numpy arrays are rebuilt on the bytes read, not copied
        self._receiver = threading.Thread(target=self._receive, daemon=True, name="forked-call")
        self._receiver.start()

    @classmethod
    def start(cls, call: Callable[..., Any], *args: Any) -> ForkedCall | None:
        """Fork a child that runs ``call(*args)``; None (nothing started) where forking is not
        safe or fails."""
        if not fork_is_safe():
            return None
        memfd = _memfd()
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:  # no memory or no process slot left: this process does it all
            for fd in (read_fd, write_fd, memfd):
                if fd is not None:
                    os.close(fd)
            return None
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _run_child(call, args, write_fd, memfd, parent)
        os.close(write_fd)
        try:
            return cls(pid, read_fd, memfd)
        except BaseException:  # (a Ctrl-C right here, no thread to be had): no child left over
            interrupted = _end(pid)
            if interrupted is not None:
                raise interrupted from None
            raise

    def _receive(self) -> None:
        try:
            status = self._read.read(1)
            if status == _DONE:
                self._value = pickle.load(self._read)
            elif status == _DONE_MAPPED:
                head, sizes = pickle.load(self._read)
                self._value = pickle.loads(head, buffers=_mapped(self._memfd, sizes))
        except Exception:  # noqa: BLE001 - a dead child, a truncated pickle: no result
            self._value = None

    def result(self) -> Any | None:
        """The call's return value, or None if it raised or the child died (the caller then
        does the work itself)."""
        self._receiver.join()
        value, self._value = self._value, None
        self.close()
        return value

    def close(self) -> None:
        """End the child if it still runs (the caller gave up on it) and reap it. A Ctrl-C
        meanwhile is raised once the child is reaped (killed, it ends at once): no child
        outlives the call, not even as a zombie."""
        if self._reaped:
            return
        interrupted = _end(self._pid)
        self._reaped = True
        try:
            self._receiver.join()  # (the child's end closed the pipe: the receiver returns)
        finally:
            self._read.close()
            if self._memfd is not None:  # (a mapping made from it stays valid)
                os.close(self._memfd)
                self._memfd = None
        if interrupted is not None:
            raise interrupted


def _end(pid: int) -> BaseException | None:
    """Kill child ``pid`` (a no-op if it exited by itself) and reap it, waiting through a
    Ctrl-C, which is returned for the caller to raise."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    interrupted = None
    while True:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        except KeyboardInterrupt as err:
            interrupted = err
            continue
        return interrupted


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent ends (Linux ``PR_SET_PDEATHSIG``);
    exit now if the parent has ended already."""
    import ctypes  # (numpy has loaded it: no cost here)

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
    except (AttributeError, OSError):  # no prctl: the child ends at its next write instead
        pass
    if os.getppid() != parent:  # (it ended before the request was made)
        os._exit(1)


def _memfd() -> int | None:
    try:
        return os.memfd_create("neuron-profiler-forked-call", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # not Linux 3.17+, or refused (a sandbox)
        return None


def _mapped(memfd: int | None, sizes: list[int]) -> list[memoryview]:
    """The child's buffers, in order, as views of one private copy-on-write mapping of the
    memfd (writable, as arrays unpickled from fresh bytes would be; never written back)."""
    if not sizes:
        return []
    if memfd is None:
        raise OSError("no memfd to map")
    view = memoryview(mmap.mmap(memfd, sum(sizes), access=mmap.ACCESS_COPY))
    out, at = [], 0
    for size in sizes:
        out.append(view[at : at + size])
        at += size
    return out


def _run_child(
    call: Callable[..., Any],
    args: tuple[Any, ...],
    write_fd: int,
    memfd: int | None,
    parent: int,
) -> None:
    """The child's whole life: run the call, send the outcome, exit without running the
    parent's exit handlers or flushing its buffered streams (``os._exit``). It ends with its
    parent: a parent killed outright (a timeout's SIGKILL) leaves no child working on (a 5M-event
    load's child holds ~1 GB for seconds)."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops and kills it
        _die_with(parent)
        with os.fdopen(write_fd, "wb") as out:
            try:
                value = call(*args)
            except BaseException:  # noqa: BLE001 - any failure: the parent does the work itself
                out.write(_FAILED)
                return
            if memfd is None:
                out.write(_DONE)
                pickle.dump(value, out, protocol=_PICKLE_PROTOCOL)
                return
            buffers: list[pickle.PickleBuffer] = []
            head = pickle.dumps(value, protocol=_PICKLE_PROTOCOL, buffer_callback=buffers.append)
            sizes = []
            with open(memfd, "wb", closefd=False) as mapped:
                for buffer in buffers:
                    raw = buffer.raw()
                    mapped.write(raw)
                    sizes.append(raw.nbytes)
            out.write(_DONE_MAPPED)
            pickle.dump((head, sizes), out, protocol=_PICKLE_PROTOCOL)
    except BaseException:  # noqa: BLE001 - e.g. the parent went away (a broken pipe)
        code = 1
    finally:
        os._exit(code)
