"""ctypes binding of libnrt's system-trace C API (``nrt/nrt_sys_trace.h``), used only when the
library loads::

    st = SysTrace.load()                  # libnrt.so.1 (or $NEURON_PROFILER_LIBNRT); raises if absent
    st.start(max_events_per_nc=1_000_000, cores={0, 1}, event_types=None)
    payload = st.fetch()                  # JSON bytes; events are handed out once
    st.stop()

Signatures: AWS's header, as docs/runtime-events.md lists it. Every call returning ``NRT_STATUS`` is
checked: a nonzero status raises ``LibnrtError`` naming the function and the code. Not run on
Trainium hardware by this project; tests use tests/fake_libnrt (same symbols, same JSON shape).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

from neuron_profiler.errors import CollectorUnavailableError, NeuronProfilerError

ENV_LIBRARY = "NEURON_PROFILER_LIBNRT"
DEFAULT_NAMES = ("libnrt.so.1", "libnrt.so")

_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_u64, _u32, _bool, _size = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_bool, ctypes.c_size_t
_status = ctypes.c_int

# name -> (restype, argtypes); restype None is a void function.
SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "nrt_sys_trace_config_allocate": (_status, [_pp]),
    "nrt_sys_trace_config_set_defaults": (_status, [_p]),
    "nrt_sys_trace_config_free": (None, [_p]),
    "nrt_sys_trace_config_set_max_events_per_nc": (None, [_p, _u64]),
    "nrt_sys_trace_config_set_capture_enabled_for_nc": (None, [_p, _u32, _bool]),
    "nrt_sys_trace_config_set_capture_enabled_for_event_type": (
        _status,
        [_p, ctypes.c_char_p, _bool],
    ),
    "nrt_sys_trace_get_event_types": (
        _status,
        [ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)), ctypes.POINTER(_size)],
    ),
    "nrt_sys_trace_free_event_types": (None, [ctypes.POINTER(ctypes.c_char_p), _size]),
    "nrt_sys_trace_start": (_status, [_p]),
    "nrt_sys_trace_stop": (_status, []),
    "nrt_sys_trace_fetch_options_allocate": (_status, [_pp]),
    "nrt_sys_trace_fetch_options_set_defaults": (_status, [_p]),
    "nrt_sys_trace_fetch_options_free": (None, [_p]),
    "nrt_sys_trace_fetch_options_set_max_events_per_nc": (_status, [_p, _u64]),
    "nrt_sys_trace_fetch_options_set_nc_idx": (_status, [_p, _u64]),
    "nrt_sys_trace_fetch_events": (
        _status,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_size), _p],
    ),
    "nrt_sys_trace_buffer_free": (None, [_p]),
}


class _Version(ctypes.Structure):
    """``nrt_version_t`` (nrt/nrt_version.h): four numbers, a detail and a git hash string."""

    _fields_ = [
        ("rt_major", _u64),
        ("rt_minor", _u64),
        ("rt_patch", _u64),
        ("rt_maintenance", _u64),
        ("rt_detail", ctypes.c_char * 128),
        ("git_hash", ctypes.c_char * 64),
    ]


class LibnrtError(NeuronProfilerError):
    """A libnrt call returned a nonzero NRT_STATUS."""

    exit_code = 4


class SysTrace:
    """One loaded libnrt; methods map 1:1 onto the capture lifecycle."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        self._cores: tuple[int, ...] = ()
        for name, (restype, argtypes) in SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as err:
                raise CollectorUnavailableError(f"{path}: symbol {name} missing") from err
            fn.restype = restype
            fn.argtypes = argtypes

    @classmethod
    def load(cls, path: str | None = None) -> SysTrace:
        """Load libnrt from ``path``, $NEURON_PROFILER_LIBNRT or the default names."""
        candidates = (
            [path]
            if path
            else ([os.environ[ENV_LIBRARY]] if os.environ.get(ENV_LIBRARY) else list(DEFAULT_NAMES))
        )
        errors = []
        for cand in candidates:
            try:
                return cls(ctypes.CDLL(cand), cand)
            except OSError as err:
                errors.append(str(err))
        raise CollectorUnavailableError(f"libnrt not loadable ({'; '.join(errors)})")

    def _check(self, name: str, status: int) -> None:
        if status != 0:
            raise LibnrtError(f"{self.path}: {name} returned NRT_STATUS {status}")

    def _call(self, name: str, *args: object) -> None:
        self._check(name, getattr(self._lib, name)(*args))

    def event_types(self) -> list[str]:
        """The event type names the library knows (there is no published list)."""
        arr = ctypes.POINTER(ctypes.c_char_p)()
        count = _size(0)
        self._call("nrt_sys_trace_get_event_types", ctypes.byref(arr), ctypes.byref(count))
        try:
            return [arr[i].decode() for i in range(count.value)]
        finally:
            self._lib.nrt_sys_trace_free_event_types(arr, count)

    def start(
        self,
        max_events_per_nc: int = 1_000_000,
        cores: Iterable[int] | None = None,
        event_types: Iterable[str] | None = None,
    ) -> None:
        """Configure (buffer size, cores, event types) and start capture."""
        cfg = ctypes.c_void_p()
        self._call("nrt_sys_trace_config_allocate", ctypes.byref(cfg))
        try:
            self._call("nrt_sys_trace_config_set_defaults", cfg)
            self._lib.nrt_sys_trace_config_set_max_events_per_nc(cfg, int(max_events_per_nc))
            self._cores = tuple(sorted(int(c) for c in cores)) if cores is not None else ()
            for core in self._cores:
                self._lib.nrt_sys_trace_config_set_capture_enabled_for_nc(cfg, core, True)
            if event_types is not None:
                wanted = set(event_types)
                for name in self.event_types():
                    self._call(
                        "nrt_sys_trace_config_set_capture_enabled_for_event_type",
                        cfg,
                        name.encode(),
                        name in wanted,
                    )
            self._call("nrt_sys_trace_start", cfg)
        finally:
            self._lib.nrt_sys_trace_config_free(cfg)

    def fetch(self, nc_idx: int | None = None, max_events_per_nc: int | None = None) -> bytes:
        """Events captured since the previous fetch (handed out once), as JSON bytes."""
        opts = ctypes.c_void_p()
        self._call("nrt_sys_trace_fetch_options_allocate", ctypes.byref(opts))
        buf, written = ctypes.c_void_p(), _size(0)
        try:
            self._call("nrt_sys_trace_fetch_options_set_defaults", opts)
            if nc_idx is not None:
                self._call("nrt_sys_trace_fetch_options_set_nc_idx", opts, int(nc_idx))
            if max_events_per_nc is not None:
                self._call(
                    "nrt_sys_trace_fetch_options_set_max_events_per_nc",
                    opts,
                    int(max_events_per_nc),
                )
            self._call("nrt_sys_trace_fetch_events", ctypes.byref(buf), ctypes.byref(written), opts)
            return ctypes.string_at(buf.value, written.value) if buf.value else b""
        finally:
            if buf.value:
                self._lib.nrt_sys_trace_buffer_free(buf)
            self._lib.nrt_sys_trace_fetch_options_free(opts)

    def stop(self) -> None:
        self._call("nrt_sys_trace_stop")

    def version(self) -> str | None:
        """``major.minor.patch.maintenance (detail)`` from ``nrt_get_version``, an optional
        symbol: None when the library does not export it or the call fails."""
        fn = getattr(self._lib, "nrt_get_version", None)
        if fn is None:
            return None
        fn.restype, fn.argtypes = _status, [ctypes.POINTER(_Version), _size]
        ver = _Version()
        if fn(ctypes.byref(ver), ctypes.sizeof(ver)) != 0:
            return None
        number = f"{ver.rt_major}.{ver.rt_minor}.{ver.rt_patch}.{ver.rt_maintenance}"
        detail = ver.rt_detail.decode("utf-8", "replace").strip()
        return f"{number} ({detail})" if detail else number

    def cores(self) -> tuple[int, ...]:
        """Cores named at start (empty: the library's default selection)."""
        return self._cores
