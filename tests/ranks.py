"""Run a worker script as the ranks of a local gloo group (one process per rank), for the
distributed tests: ``run_ranks(script, lambda r: [out_path(r)], folder)``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    worker: str,
    args_of: Callable[[int], list[str]],
    folder: Path,
    *,
    world: int = 2,
    timeout: int = 600,
) -> None:
    """Write ``worker`` to ``folder`` and run it once per rank with ``args_of(rank)``, in a
    clean environment (no NEURON_PROFILER_* settings of the caller); every rank must succeed."""
    script = folder / "worker.py"
    script.write_text(worker)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_PROFILER_")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    # one intra-op thread per rank unless the caller says otherwise, as torchrun sets it: the
    # ranks share this machine's cores, and the tests' wall-clock waits (a rank that sleeps
    # 20 ms) otherwise depend on how their thread pools contend
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args_of(r)],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    failed = []
    for rank, p in enumerate(procs):
        _, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            failed.append(f"rank {rank} (exit {p.returncode}):\n{err[-3000:]}")
    # every failed rank's tail: the first to fail is often not rank 0 (the others then see a
    # connection reset)
    assert not failed, "\n\n".join(failed)


def event_spans(
    events: list[dict], event_type: str, epoch_of: Callable[[int], int]
) -> list[tuple[int, int, dict]]:
    """(start, end, start event data) per span of this type among a runtime capture's events,
    in the order they end: device spans on the host clock (``nc_timestamp_ns`` plus
    ``epoch_of(core)``), host spans by their timestamps."""
    from neuron_profiler.runtime_trace import format as F

    starts, out = {}, []
    for e in events:
        if e["event_type"] != event_type:
            continue
        if e["phase"] == F.START:
            starts[e["tracking_id"]] = e
        elif e["phase"] == F.STOP and e["tracking_id"] in starts:
            s = starts.pop(e["tracking_id"])
            if "nc_timestamp_ns" in s["data"]:
                epoch = epoch_of(s["data"].get("device_core_idx", 0))
                a = s["data"]["nc_timestamp_ns"] + epoch
                b = e["data"]["nc_timestamp_ns"] + epoch
            else:
                a, b = s["timestamp_ns"], e["timestamp_ns"]
            out.append((a, b, s["data"]))
    return out
