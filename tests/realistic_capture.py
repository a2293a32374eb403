"""Captures in the shape libnrt 2.31 writes (docs/runtime-events.md), with the
truth a test checks against: the host-clock span of every device event and the host op of every
runtime call.

    cap = Capture(cores=2, epoch_hours=3, drift_ppm=40)
    op = cap.host_op(tid=11, start=cap.now, dur=200_000)        # an aten op on a profiled thread
    cap.execute(tid=11, core=0, start=op.start + 1_000, device_dur=50_000, model_id=3)
    payload = cap.fetch()                                          # handed out once, like libnrt

What is real-shaped: keys in the documented order, `data` always an object (`{}` when empty),
host calls with `model_id` only, `exec_id` on the `kbl_exec_*` stages and on `nc_exec_running` /
`cc_running`, device-side types stamped with the **device** clock in `timestamp_ns` (the payload's
`nc_timestamp_ns` overrides it), copies as host spans with `size`, collectives with
`cc_exec_barrier` spans, `"0x..."` addresses, absent optional keys, no drop count in the envelope.
Every core's clock starts hours away from the host's and drifts; sync points come and go.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

HOST_T0 = 1_760_000_000_000_000_000


@dataclass(frozen=True)
class HostOp:
    corr: int
    tid: int
    start: int
    end: int


@dataclass
class Truth:
    """device: (event_type, core, tracking_id) -> (host start, host end) of each device span.
    call_op: tracking id of each runtime call -> the External id it must get (0: unlinked).
    work_call: (event_type, core, tracking_id) of device work -> its call's tracking id."""

    device: dict[tuple[str, int, int], tuple[int, int]] = field(default_factory=dict)
    call_op: dict[int, int] = field(default_factory=dict)
    work_call: dict[tuple[str, int, int], int] = field(default_factory=dict)
    copies: dict[int, tuple[str, int]] = field(default_factory=dict)  # tracking -> (dir, size)


class Capture:
    """Records events per core as the runtime's ring buffers would, and the truth about them."""

    def __init__(
        self, cores: int = 2, *, epoch_hours: float = 3.0, drift_ppm: float = 40.0, seed: int = 0
    ) -> None:
        self.rng = random.Random(seed)
        self.cores = cores
        self.now = HOST_T0
        self._offset = {
            c: int(epoch_hours * 3600e9 * (1 + c)) * (-1 if c % 2 else 1) for c in range(cores)
        }
        self._drift = {c: drift_ppm * (1 + 0.5 * c) * 1e-6 for c in range(cores)}
        self._ring: dict[int, list[dict]] = {c: [] for c in range(cores)}
        self._id = self._tracking = self._exec = self._tensor = 0
        self.ops: list[HostOp] = []
        self.truth = Truth()

    # -- clocks --------------------------------------------------------------------------------
    def device_ns(self, core: int, host_ns: int) -> int:
        """The core's clock at host time ``host_ns``: hours away, drifting linearly."""
        return host_ns + self._offset[core] + round((host_ns - HOST_T0) * self._drift[core])

    def sync(self, core: int, host_ns: int, exec_id: int = 0) -> None:
        nc = self.device_ns(core, host_ns)
        self._event(
            core,
            "timestamp_sync_point",
            "instant",
            0,
            nc,
            {"exec_id": exec_id, "nc_timestamp_ns": nc, "cpu_timestamp_ns": host_ns},
        )

    # -- host ops (what torch.profiler records) ------------------------------------------------
    def host_op(self, tid: int, start: int, dur: int) -> HostOp:
        op = HostOp(corr=len(self.ops) + 1, tid=tid, start=start, end=start + dur)
        self.ops.append(op)
        return op

    def op_of(self, tid: int, t: int) -> int:
        """The innermost host op on ``tid`` around ``t`` (0: none)."""
        around = [o for o in self.ops if o.tid == tid and o.start <= t <= o.end]
        return max(around, key=lambda o: (o.start, -o.end)).corr if around else 0

    # -- runtime activity ----------------------------------------------------------------------
    def execute(
        self,
        *,
        tid: int,
        core: int,
        start: int,
        device_dur: int,
        model_id: int = 1,
        api: str = "nrt_execute",
        seq: int | None = None,
        device_seq: bool = True,
        queue_free: int = 0,
        exec_id: int | None = None,
    ) -> int:
        """One execution: the host call with its kbl stages, then nc_exec_running on the core
        (a compiled graph covering any number of ops, or one eager op). Returns its end."""
        self._exec += 1
        eid = self._exec if exec_id is None else exec_id
        call_end = start + 60_000
        tracking = self._span(core, api, tid, start, call_end, {"model_id": model_id}, seq=seq)
        self.truth.call_op[tracking] = self.op_of(tid, start)
        t = start + 5_000
        for stage, dur in (
            ("kbl_exec_pre", 15_000),
            ("kbl_exec_wait", 20_000),
            ("kbl_exec_post", 10_000),
        ):
            self._span(core, stage, tid, t, t + dur, {"exec_id": eid, "model_id": model_id})
            t += dur + 2_000
        dev_start = max(start + 25_000, queue_free)
        dev_end = dev_start + device_dur
        work = self._device_span(
            core,
            "nc_exec_running",
            tid,
            dev_start,
            dev_end,
            {"device_core_idx": core, "exec_id": eid, "model_id": model_id},
            seq=seq if device_seq else None,
        )
        self.truth.work_call[("nc_exec_running", core, work)] = tracking
        return dev_end

    def collective(
        self,
        *,
        tid: int,
        core: int,
        start: int,
        wait: int,
        dur: int,
        algorithm: str | None = "ring",
    ) -> int:
        """An execution holding a collective: its barrier wait, then cc_running."""
        self._exec += 1
        eid = self._exec
        call = self._span(core, "nrt_execute", tid, start, start + 40_000, {"model_id": 9})
        self.truth.call_op[call] = self.op_of(tid, start)
        self._span(
            core, "kbl_exec_pre", tid, start + 2_000, start + 9_000, {"exec_id": eid, "model_id": 9}
        )
        b0 = start + 20_000
        self._device_span(core, "cc_exec_barrier", tid, b0, b0 + wait, {"model_id": 9})
        cc = {"gid": 0, "op_id": self._exec, "exec_id": eid}
        if algorithm is not None:
            cc["algorithm"] = algorithm
        work = self._device_span(core, "cc_running", tid, b0 + wait, b0 + wait + dur, cc)
        self.truth.work_call[("cc_running", core, work)] = call
        return b0 + wait + dur

    def copy(self, *, tid: int, core: int, start: int, direction: str, size: int, dur: int) -> None:
        """nrt_tensor_write (h2d) or nrt_tensor_read (d2h) around its host-timed copy span."""
        self._tensor += 1
        api, span = (
            ("nrt_tensor_write", "dmem_buf_copyin")
            if direction == "h2d"
            else ("nrt_tensor_read", "dmem_buf_copyout")
        )
        call = self._span(
            core, api, tid, start, start + dur + 10_000, {"tensor_id": self._tensor, "size": size}
        )
        self.truth.call_op[call] = self.op_of(tid, start)
        work = self._span(
            core,
            span,
            tid,
            start + 4_000,
            start + 4_000 + dur,
            {
                "mem_type": "device",
                "mem_handle": f"0x{0x7F00 + self._tensor:x}",
                "offset": 0,
                "size": size,
            },
        )
        self.truth.work_call[(span, core, work)] = call
        self.truth.copies[work] = (direction, size)

    def tensor_events(self, *, tid: int, core: int, t: int, size: int) -> None:
        self._tensor += 1
        self._event(
            core,
            "nrt_tensor_allocate",
            "instant",
            tid,
            t,
            {"tensor_id": self._tensor, "size": size},
        )
        self._event(
            core,
            "nrt_tensor_free",
            "instant",
            tid,
            t + 1_000,
            {"tensor_id": self._tensor, "size": size, "ref_count": 0},
        )

    def odd_events(self, *, core: int, t: int) -> None:
        """Types we do not show specially: a hardware notification (device clock), an empty
        payload, a memory allocation with names and "0x" addresses, a type named only in words."""
        nc = self.device_ns(core, t)
        self._event(
            core,
            "hw_notify",
            "instant",
            0,
            nc,
            {
                "device_core_idx": core,
                "hint": 2,
                "custom_data": 7,
                "nc_timestamp_ns": nc,
                "exec_id": 0,
            },
        )
        self._event(core, "notification_consume_errors", "instant", 0, t + 1, {})
        self._span(
            core,
            "nrt_dma_mem_alloc",
            0,
            t + 2,
            t + 900,
            {"hbm_idx": 0, "is_nc_hbm": True, "usage_type": "tensor"},
            stop_data={
                "allocated_bytes": 4096,
                "total_bytes": 1 << 20,
                "physical_address": "0x7fab00001000",
            },
        )
        self._event(
            core,
            "tensor_block",
            "unknown",
            0,
            t + 3,
            {"tensor_id": 1, "pending_reader_count": 0, "pending_writer_count": 1},
        )
        self._span(
            core,
            "nrt_dma_mem_dealloc",
            0,
            t + 950,
            t + 990,
            {"hbm_idx": 0},
            stop_data={"freed_bytes": 4096, "total_bytes": 1 << 20},
        )
        self._event(core, "nrt_profile_add_node_info", "instant", 0, t + 4, {})
        for etype in ("numerical_err", "nrt_model_switch"):  # hardware group: device clock
            self._event(
                core,
                etype,
                "instant",
                0,
                nc + 5,
                {"device_core_idx": core, "model_id": 2, "exec_id": 0, "nc_timestamp_ns": nc + 5},
            )

    def submit(self, *, tid: int, core: int, start: int, device_dur: int) -> None:
        """nrt_model_submit with a kbl_exec_core stage, then its execution."""
        self._exec += 1
        call = self._span(core, "nrt_model_submit", tid, start, start + 30_000, {"model_id": 4})
        self.truth.call_op[call] = self.op_of(tid, start)
        self._span(
            core,
            "kbl_exec_core",
            tid,
            start + 3_000,
            start + 20_000,
            {"exec_id": self._exec, "model_id": 4},
        )
        work = self._device_span(
            core,
            "nc_exec_running",
            tid,
            start + 40_000,
            start + 40_000 + device_dur,
            {"device_core_idx": core, "exec_id": self._exec, "model_id": 4},
        )
        self.truth.work_call[("nc_exec_running", core, work)] = call

    # -- fetch ---------------------------------------------------------------------------------
    def fetch(self, cores: list[int] | None = None, drop_oldest: int = 0) -> bytes:
        """Hand out the chosen cores' events once, oldest first; ``drop_oldest`` loses that many
        of each core's oldest events first, as a full ring buffer does (no count is reported)."""
        events = []
        for core in cores if cores is not None else range(self.cores):
            ring, self._ring[core] = self._ring[core], []
            events += sorted(ring, key=lambda e: e["id"])[drop_oldest:]
        return json.dumps({"events": events, "data_version": 2}, separators=(",", ":")).encode()

    # -- recording -----------------------------------------------------------------------------
    def _event(
        self,
        core: int,
        etype: str,
        phase: str,
        tid: int,
        ts: int,
        data: dict,
        tracking: int | None = None,
        seq: int | None = None,
    ) -> None:
        self._id += 1
        ev = {
            "event_type": etype,
            "phase": phase,
            "id": self._id,
            "nc_idx": core,
            "nc_local_id": self._id,
            "tracking_id": self._id if tracking is None else tracking,
            "thread_id": tid,
            "worker_gid": core,
            "data": data,
            "timestamp_ns": ts,
        }
        if seq is not None:
            ev["nrta_seq_id"] = seq
        self._ring[core].append(ev)

    def _span(
        self,
        core: int,
        etype: str,
        tid: int,
        start: int,
        end: int,
        data: dict,
        seq: int | None = None,
        stop_data: dict | None = None,
    ) -> int:
        """A host-side span (host clock); the payload goes on the start, the stop is empty."""
        self._tracking += 1
        self._event(core, etype, "start", tid, start, data, self._tracking, seq)
        self._event(core, etype, "stop", tid, end, stop_data or {}, self._tracking, seq)
        return self._tracking

    def _device_span(
        self,
        core: int,
        etype: str,
        tid: int,
        start: int,
        end: int,
        data: dict,
        seq: int | None = None,
    ) -> int:
        """A device-side span: stamped on the core's clock, `timestamp_ns` overridden by it."""
        self._tracking += 1
        s, e = self.device_ns(core, start), self.device_ns(core, end)
        self._event(
            core, etype, "start", tid, s, {**data, "nc_timestamp_ns": s}, self._tracking, seq
        )
        self._event(core, etype, "stop", tid, e, {"nc_timestamp_ns": e}, self._tracking, seq)
        self.truth.device[(etype, core, self._tracking)] = (start, end)
        return self._tracking
