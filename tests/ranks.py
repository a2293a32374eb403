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
