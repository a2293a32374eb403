"""A stand-in for dynolog's IPC endpoint, enough to drive libkineto's daemon on-demand path
(``KINETO_USE_DAEMON``) in tests, where dynolog itself cannot be installed (docs/collector.md).

libkineto's ``IpcFabricConfigClient`` sends unix datagrams to the endpoint named ``dynolog``
(a file in ``$KINETO_IPC_SOCKET_DIR`` when that is set): a 40-byte header (``size_t`` payload
size, 32-byte NUL-terminated type) and the payload. ``"req"`` asks for an on-demand config (an
``int type, int n, int64 jobid, int32 pids[n]`` request); the answer is a ``"req"`` message whose
payload is the config text, empty when nothing is pending. ``"ctxt"`` registers a process and
is answered with an int32. Layout from dynolog's ``ipcfabric`` headers as vendored in kineto
(``libkineto/third_party/dynolog_headers``).
"""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

ENDPOINT = "dynolog"  # the name libkineto sends to (IpcFabricConfigClient's kDynoIpcName)
HEADER = struct.Struct("<Q32s")  # ipcfabric::Metadata: size_t size; char type[32]
REQUEST = struct.Struct("<iiq")  # ipcfabric::LibkinetoRequest before its pids[]
MAX_DATAGRAM = 1 << 16


class FakeDynolog:
    """Answers libkineto's polls from a thread; ``trigger(pid, config)`` hands ``config`` to the
    next poll that names ``pid`` among its process ids (once). ``polls`` counts the polls seen
    per pid, so a test can tell the process reached the daemon at all."""

    def __init__(self, socket_dir: Path) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(socket_dir / ENDPOINT))
        self._sock.settimeout(0.2)
        self._pending: dict[int, str] = {}
        self._lock = threading.Lock()
        self.polls: dict[int, int] = {}
        self.delivered: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def trigger(self, pid: int, config: str) -> None:
        with self._lock:
            self._pending[pid] = config

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                return
            if len(data) < HEADER.size or not peer:
                continue
            size, raw_type = HEADER.unpack_from(data)
            kind = raw_type.split(b"\0", 1)[0]
            payload = data[HEADER.size : HEADER.size + size]
            if kind == b"ctxt":
                self._reply(peer, b"ctxt", struct.pack("<i", 0))
            elif kind == b"req":
                self._reply(peer, b"req", self._answer(payload).encode())

    def _answer(self, payload: bytes) -> str:
        if len(payload) < REQUEST.size:
            return ""
        _, n, _ = REQUEST.unpack_from(payload)
        pids = struct.unpack_from(f"<{n}i", payload, REQUEST.size)
        with self._lock:
            for pid in pids:
                self.polls[pid] = self.polls.get(pid, 0) + 1
            for pid in pids:
                if pid in self._pending:
                    self.delivered.append(pid)
                    return self._pending.pop(pid)
        return ""

    def _reply(self, peer: str, kind: bytes, body: bytes) -> None:
        try:
            self._sock.sendto(HEADER.pack(len(body), kind) + body, peer)
        except OSError:
            pass  # the process went away between its poll and our answer
