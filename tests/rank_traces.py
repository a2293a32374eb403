"""Synthetic rank traces for the cross-rank tests: one rank of an all_reduce loop with known
compute, host delay and clock shift per rank (``rank_trace``), written as Chrome JSON."""

from __future__ import annotations

from pathlib import Path

from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.trace import EventKind, TraceBuilder
from neuron_profiler.trace import vocabulary as V

MS = 1_000_000
STEP_NS, COLL_NS = 20 * MS, 1 * MS


def rank_trace(
    path: Path,
    rank: int,
    compute_ns: dict[int, int],
    *,
    shift_ns: int = 0,
    t0_ns: int = 10**12,
    steps: int = 3,
    world: int | None = 2,
    waits: str = "rows",
    host_delay_ns: dict[int, int] | None = None,
    step_lead_ns: int = 0,
    sends: bool = False,
) -> Path:
    """One rank of an all_reduce loop: compute, then the collective, which ends on every rank
    ``COLL_NS`` after the slowest rank's compute is done. ``waits``: "rows", the early ranks
    wait in ``CC wait:`` rows (the emulator); "kernel", the collective kernel starts at the
    rank's arrival and spins until all have arrived (NCCL); "none", the device idles until the
    collective starts (the wait is not recorded). ``host_delay_ns``: per rank, how long its host
    spends in the DataLoader at each step's start before launching its compute (its device
    idles meanwhile). ``step_lead_ns``: this rank's first ProfilerStep begins that much earlier
    (and is that much longer: its profiling started earlier). Every time on this rank is written ``shift_ns``
    later (its clock). ``sends``: after each all_reduce this rank sends to another rank
    (``CC: send``, whose row names the whole group, as the emulator writes it)."""
    delay = host_delay_ns or {}
    b = TraceBuilder()
    if world is not None:
        b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    group = list(range(len(compute_ns)))
    cc_args = {
        V.ARG_COLLECTIVE: "allreduce",
        V.ARG_GROUP_RANKS: group,
        V.ARG_GROUP_SIZE: len(group),
    }
    for k in range(steps):
        s = t0_ns + k * STEP_NS
        meet = s + max(delay.get(r, 0) + c for r, c in compute_ns.items())
        ready = s + delay.get(rank, 0) + compute_ns[rank]  # its device reaches the collective
        lead = step_lead_ns if k == 0 else 0
        b.add(
            name=f"ProfilerStep#{k}",
            ts_ns=s - lead + shift_ns,
            dur_ns=STEP_NS + lead,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=9,
            tid=9,
        )
        if delay.get(rank):
            b.add(
                name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                ts_ns=s + shift_ns,
                dur_ns=delay[rank],
                kind=EventKind.CPU_OP,
                cat="cpu_op",
                pid=9,
                tid=9,
            )
        b.add(
            name="TensorE: mm",
            ts_ns=s + delay.get(rank, 0) + shift_ns,
            dur_ns=compute_ns[rank],
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=1,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 1},
        )
        if waits == "rows" and meet > ready:
            collective_row(
                b,
                V.COLLECTIVE_WAIT_PREFIX + "allreduce",
                ready + shift_ns,
                meet - ready,
                {V.ARG_COLLECTIVE_WAIT: True, **cc_args},
            )
        begin = ready if waits == "kernel" else meet
        collective_row(
            b,
            "CC: allreduce",
            begin + shift_ns,
            meet + COLL_NS - begin,
            {V.ARG_IS_COLLECTIVE: True, **cc_args},
        )
        if sends:
            collective_row(
                b,
                "CC: send",
                meet + COLL_NS + 1_000 + shift_ns,
                5_000,
                {V.ARG_IS_COLLECTIVE: True, **cc_args, V.ARG_COLLECTIVE: "send"},
            )
    b.process_names[0] = V.core_process_name(0)
    write_chrome_trace(b.build(), path)
    return path


def collective_row(b: TraceBuilder, name: str, ts_ns: int, dur_ns: int, args: dict) -> None:
    """A row of device 0's collective queue (stream 3), with ``args`` besides its device and
    stream."""
    b.add(
        name=name,
        ts_ns=ts_ns,
        dur_ns=dur_ns,
        kind=EventKind.KERNEL,
        cat=V.CAT_KERNEL,
        pid=0,
        tid=3,
        args={V.ARG_DEVICE: 0, V.ARG_STREAM: 3, **args},
    )
