"""SYNTHETIC Neuron Explorer system profiles, with the truth a test checks against.

No real Explorer capture is public. This writes the columns AWS documents (Profile Parquet Schema
Reference, schema 7.4.0) with the event mix a public AWS workshop reports for 20 vLLM
executions: nrt_tensor_free 4,800, dmem_buf_copyin 1,082, nrt_dma_mem_alloc 982, cc_running 720,
dmem_buf_copyout 385, nrt_tensor_read 305, nrt_tensor_write 280, nc_exec_running 40,
kbl_exec_pre / kbl_exec_post 20 each. Those add up to 8,634 while the workshop's total is 9,634:
the other 1,000 are written as framework events (50 per execution; an ASSUMPTION, docs/explorer.md).

    fx = build(executions=20, seed=0)
    fx.write(directory)                 # Parquet tables (+ legacy JSON with legacy=True)
    fx.truth.external[event_id]         # the External id each runtime/hardware event must get

Per execution, on one instance and process (every value below is ours, not measured):
- a framework op ``vllm::execute_model`` (flow id F) around the execution on the host thread;
- tensor writes, each inside its own ``aten::copy_`` framework op, holding the copy-ins;
- framework fillers, tensor frees (instants) and DMA allocations (HBM usage samples);
- ``kbl_exec_pre`` / ``kbl_exec_post`` (flow id F, ``exec_id``) on a runtime worker thread that
  has no framework op: only the flow links them;
- ``nc_exec_running`` on NeuronCores 0 and 1 (same ``exec_id``), ``cc_running`` inside them
  (``op_id``; CcOp holds their sizes);
- tensor reads inside ``aten::copy_`` ops holding the copy-outs.

With ``streams=True`` every other tensor call (and its copies) runs instead on a runtime worker
thread (``STREAM_TID``) with no flow id and a ``framework_stream_id`` naming the host thread, as
AWS documents the column (the thread of the framework event that launched it); that worker
thread carries one framework op of its own around each execution (``python::runtime_worker``,
a decoy: containment on the call's own thread finds it, the stream names the right op).
``truth.streamed`` lists those calls; ``truth.own_thread`` the External id each of them and its
copies gets by containment on its own thread alone (the rule without the column).

``hosts``: the host processes that each run the executions, one ``Host`` each (default: one,
``INSTANCE`` / ``PID``): the same layout per host, its threads offset by ``tid_offset``, its
times by ``shift_ns``, its flow ids by ``flow_offset`` (0: every host numbers its flows alike,
as separate processes do), its collectives' op ids kept apart. ``truth.host`` then holds each
host-side event's thread as written; ``Fixture.host_of`` says which host wrote an event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EVENT_MIX = {
    "nrt_tensor_free": 4800,
    "dmem_buf_copyin": 1082,
    "nrt_dma_mem_alloc": 982,
    "cc_running": 720,
    "dmem_buf_copyout": 385,
    "nrt_tensor_read": 305,
    "nrt_tensor_write": 280,
    "nc_exec_running": 40,
    "kbl_exec_pre": 20,
    "kbl_exec_post": 20,
}
FRAMEWORK_EVENTS = 1000  # 9,634 reported - 8,634 listed
EXECUTIONS = 20
T0 = 1_766_072_156_592_459_482
INSTANCE = "i-0synthetic00000001"
PID, HOST_TID, RUNTIME_TID, HW_TID = 4242, 4243, 4250, 0
STREAM_TID = 4260  # streams=True: the worker thread tensor calls run on
CORES = (0, 1)
WORKER_BASE = 100
HBM_CATEGORIES = ("tensors_bytes", "weights_bytes", "io_bytes", "scratchpad_bytes")
OTHER_HBM_CATEGORIES = ("generic_bytes", "collectives_bytes", "unknown_bytes")
US = 1_000


@dataclass(frozen=True)
class Host:
    """One host process that runs the executions (see the module docstring)."""

    instance: str = INSTANCE
    pid: int = PID
    tid_offset: int = 0
    shift_ns: int = 0
    flow_offset: int = 0


@dataclass
class Truth:
    """external: event id -> External id (framework events: in start order from 1).
    span: event id -> (start, end). core: event id -> nc_idx of device-side rows.
    host: event id -> thread of host-side rows. nbytes: event id -> bytes (copies, collectives).
    hbm_total: per HBM sample (file order) its total."""

    external: dict[int, int] = field(default_factory=dict)
    span: dict[int, tuple[int, int]] = field(default_factory=dict)
    core: dict[int, int] = field(default_factory=dict)
    host: dict[int, int] = field(default_factory=dict)
    nbytes: dict[int, int] = field(default_factory=dict)
    framework_ids: list[int] = field(default_factory=list)  # event ids, start order
    root_of_execution: list[int] = field(default_factory=list)  # event id of each execution's op
    hbm_total: list[int] = field(default_factory=list)
    streamed: list[int] = field(default_factory=list)  # calls linked only by their stream
    own_thread: dict[int, int] = field(default_factory=dict)  # their link without the stream


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


class Fixture:
    def __init__(
        self,
        executions: int = EXECUTIONS,
        seed: int = 0,
        streams: bool = False,
        hosts: tuple[Host, ...] = (Host(),),
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.streams = streams
        self.hosts = hosts
        self.host = hosts[0]  # the host being written
        self._host_index = 0
        self._worker_op = 0  # streams=True: the decoy op of the current execution
        self.events: list[dict] = []
        self.hbm: list[dict] = []
        self.cc: list[dict] = []
        self.truth = Truth()
        self.executions = executions
        self._hbm_state = {
            (k, h): dict.fromkeys(HBM_CATEGORIES, 0) for k in range(len(hosts)) for h in CORES
        }
        self._event_host: list[int] = []  # per event, its host's index

    def host_of(self, event_id: int) -> Host:
        """The host that wrote an event."""
        return self.hosts[self._event_host[event_id - 1]]

    def _tid(self, tid: int) -> int:
        return tid + self.host.tid_offset

    # -- events -----------------------------------------------------------------------------
    def _event(self, name: str, source: str, start: int, end: int, **kw: object) -> int:
        eid = len(self.events) + 1
        flows = kw.pop("flow", None)
        extra = kw.pop("extra", None)
        row = {
            "id": eid,
            "name": name,
            "start_ts": int(start),
            "end_ts": int(end),
            "duration_ns": int(end - start),
            "trace_event_source": source,
            "instance_id": self.host.instance,
            "process_id": self.host.pid,
            "thread_id": self._tid(kw.pop("tid", HOST_TID)),
            "nc_idx": kw.pop("nc", None),
            "pcore_idx": None,
            "worker_gid": None,
            "flow_id": [str(f) for f in flows] if flows else None,
            "framework_stream_id": kw.pop("stream", None),
            "extra_attributes_json": json.dumps(extra) if extra is not None else None,
        }
        if row["nc_idx"] is not None:
            row["worker_gid"] = WORKER_BASE + row["nc_idx"]
            row["pcore_idx"] = row["nc_idx"]
        self.events.append(row)
        self._event_host.append(self._host_index)
        self.truth.span[eid] = (int(start), int(end))
        return eid

    def _framework(
        self, name: str, start: int, end: int, flow: list[int] | None = None, tid: int = HOST_TID
    ) -> int:
        """A framework op; its stream id is its own thread (AWS: the driver event's thread)."""
        stream = str(self._tid(tid))
        return self._event(name, "framework", start, end, flow=flow, tid=tid, stream=stream)

    def build(self) -> Fixture:
        scale = self.executions / EXECUTIONS  # the mix is per 20 executions
        counts = {k: _split(round(v * scale), self.executions) for k, v in EVENT_MIX.items()}
        fw_counts = _split(round(FRAMEWORK_EVENTS * scale), self.executions)
        for index, host in enumerate(self.hosts):
            self.host, self._host_index = host, index
            t = T0 + host.shift_ns
            for e in range(self.executions):
                t = self._execution(e, t, {k: v[e] for k, v in counts.items()}, fw_counts[e])
                t += 200 * US
        self._externals()
        return self

    def _execution(self, e: int, t0: int, n: dict[str, int], n_fw: int) -> int:
        flow, exec_id = 1_000 + e + self.host.flow_offset, e + 1
        root = self._framework("vllm::execute_model", t0, t0, flow=[flow])  # end set below
        self.truth.root_of_execution.append(root)
        if self.streams:  # end set below
            self._worker_op = self._framework("python::runtime_worker", t0, t0, tid=STREAM_TID)
        cur = t0 + 10 * US
        cur = self._copies(
            cur,
            "nrt_tensor_write",
            "dmem_buf_copyin",
            n["nrt_tensor_write"],
            n["dmem_buf_copyin"],
            root,
        )
        fillers = n_fw - 1 - n["nrt_tensor_write"] - n["nrt_tensor_read"]
        for _ in range(fillers):
            self._framework("aten::empty", cur, cur + 4 * US)
            cur += 6 * US
        for i in range(n["nrt_dma_mem_alloc"]):
            cur = self._alloc(cur, i)
        for _ in range(n["nrt_tensor_free"]):
            eid = self._event(
                "nrt_tensor_free",
                "neuron_rt",
                cur,
                cur,
                nc=0,
                extra={"tensor_id": int(self.rng.integers(1, 10**6)), "size": 4096},
            )
            self.truth.core[eid] = 0
            cur += 1 * US
        pre = self._event(
            "kbl_exec_pre",
            "neuron_rt",
            cur,
            cur + 20 * US,
            tid=RUNTIME_TID,
            nc=0,
            flow=[flow],
            extra={"exec_id": exec_id, "model_id": 7},
        )
        self.truth.host[pre] = self._tid(RUNTIME_TID)
        self.truth.external[pre] = -root  # resolved to the root's External id later
        dev_start = cur + 25 * US
        cc_per_core = _split(n["cc_running"], len(CORES))
        exec_per_core = _split(n["nc_exec_running"], len(CORES))
        dev_end = dev_start
        for c in CORES:
            dev_end = max(
                dev_end,
                self._device(c, dev_start, exec_id, exec_per_core[c], cc_per_core[c], e, root),
            )
        post = self._event(
            "kbl_exec_post",
            "neuron_rt",
            dev_end + 5 * US,
            dev_end + 20 * US,
            tid=RUNTIME_TID,
            nc=0,
            flow=[flow],
            extra={"exec_id": exec_id},
        )
        self.truth.host[post] = self._tid(RUNTIME_TID)
        self.truth.external[post] = -root
        cur = dev_end + 30 * US
        cur = self._copies(
            cur,
            "nrt_tensor_read",
            "dmem_buf_copyout",
            n["nrt_tensor_read"],
            n["dmem_buf_copyout"],
            root,
        )
        end = cur + 10 * US
        for op in (root, self._worker_op) if self.streams else (root,):
            self.events[op - 1]["end_ts"] = end
            self.events[op - 1]["duration_ns"] = end - t0
            self.truth.span[op] = (t0, end)
        return end

    def _copies(self, cur: int, call: str, copy: str, calls: int, copies: int, root: int) -> int:
        for i, k in enumerate(_split(copies, calls)):
            op_start = cur
            op = self._framework("aten::copy_", op_start, op_start)  # end set below
            c0 = op_start + 2 * US
            streamed = self.streams and i % 2 == 1
            where = {"tid": STREAM_TID, "stream": str(self._tid(HOST_TID))} if streamed else {}
            call_id = self._event(
                call,
                "neuron_rt",
                c0,
                c0 + (3 + 6 * k) * US,
                nc=0,
                extra={"tensor_id": int(self.rng.integers(1, 10**6)), "size": 0},
                **where,
            )
            self.truth.host[call_id] = self._tid(STREAM_TID if streamed else HOST_TID)
            self.truth.external[call_id] = -op
            if streamed:
                self.truth.streamed.append(call_id)
                self.truth.own_thread[call_id] = -self._worker_op
            t = c0 + 2 * US
            total = 0
            for _ in range(k):
                size = int(self.rng.integers(1, 64)) * 4096
                total += size
                cid = self._event(
                    copy,
                    "neuron_rt",
                    t,
                    t + 5 * US,
                    nc=0,
                    extra={"mem_type": "host", "mem_handle": "0x7f00", "offset": 0, "size": size},
                    **where,
                )
                self.truth.core[cid] = 0
                self.truth.nbytes[cid] = size
                self.truth.external[cid] = -op
                if streamed:
                    self.truth.own_thread[cid] = -self._worker_op
                t += 6 * US
            self.events[call_id - 1]["extra_attributes_json"] = json.dumps(
                {"tensor_id": 1, "size": total}
            )
            end = c0 + (3 + 6 * k) * US + 2 * US
            self.events[op - 1]["end_ts"] = end
            self.events[op - 1]["duration_ns"] = end - op_start
            self.truth.span[op] = (op_start, end)
            cur = end + 3 * US
        return cur

    def _alloc(self, cur: int, i: int) -> int:
        hbm = i % len(CORES)
        cat = HBM_CATEGORIES[i % len(HBM_CATEGORIES)]
        size = int(self.rng.integers(1, 256)) * 65536
        state = self._hbm_state[(self._host_index, hbm)]
        state[cat] += size
        eid = self._event(
            "nrt_dma_mem_alloc",
            "neuron_rt",
            cur,
            cur + 2 * US,
            nc=hbm,
            extra={
                "hbm_idx": hbm,
                "usage_type": cat[:-6],
                "allocated_bytes": size,
                "total_bytes": sum(state.values()),
            },
        )
        self.truth.core[eid] = hbm
        sample = {
            "timestamp": cur + 2 * US,
            "device_idx": 0,
            "hbm_idx": hbm,
            "instance_id": self.host.instance,
            **state,
        }
        sample.update(dict.fromkeys(OTHER_HBM_CATEGORIES, 0))
        sample["total_bytes"] = sum(state.values())
        self.hbm.append(sample)
        self.truth.hbm_total.append(sample["total_bytes"])
        return cur + 3 * US

    def _device(
        self, core: int, start: int, exec_id: int, n_exec: int, n_cc: int, e: int, root: int
    ) -> int:
        t = start + core * 2 * US
        end = t
        for part in _split(n_cc, max(n_exec, 1))[: max(n_exec, 1)]:
            span = (part + 1) * 100 * US
            nid = self._event(
                "nc_exec_running",
                "neuron_hw",
                t,
                t + span,
                tid=HW_TID,
                nc=core,
                extra={"exec_id": exec_id, "model_id": 7, "device_core_idx": core},
            )
            self.truth.core[nid] = core
            self.truth.external[nid] = -root
            for j in range(part):
                op_id = self._host_index * 1_000_000 + e * 1000 + j
                c0 = t + 20 * US + j * 100 * US
                cid = self._event(
                    "cc_running",
                    "neuron_hw",
                    c0,
                    c0 + 60 * US,
                    tid=HW_TID,
                    nc=core,
                    extra={"exec_id": exec_id, "op_id": op_id, "gid": 0},
                )
                insize = int(self.rng.integers(1, 512)) * 1024
                out = insize * (2 if j % 2 else 1)
                self.cc.append(
                    {
                        "op_id": op_id,
                        "operation": "AllGather" if j % 2 else "AllReduce",
                        "algorithm": "Ring",
                        "input_size": insize,
                        "output_size": out,
                        "start_ts": c0 - T0,
                        "end_ts": c0 - T0 + 60 * US,
                        "duration_ns": 60 * US,
                        "num_elements": insize // 2,
                        "dtype": "bf16",
                    }
                )
                self.truth.core[cid] = core
                self.truth.nbytes[cid] = max(insize, out)
                self.truth.external[cid] = -root
            end = t + span
            t = end + 5 * US
        return end

    def _externals(self) -> None:
        """Framework events get External ids 1, 2, ... in start order (the export's rule)."""
        fw = [ev for ev in self.events if ev["trace_event_source"] == "framework"]
        fw.sort(key=lambda ev: (ev["start_ts"], ev["id"]))
        ext = {ev["id"]: k + 1 for k, ev in enumerate(fw)}
        self.truth.framework_ids = [ev["id"] for ev in fw]
        for eid, value in list(self.truth.external.items()):
            if value < 0:
                self.truth.external[eid] = ext[-value]
        self.truth.external.update(ext)
        self.truth.own_thread = {e: ext[-v] for e, v in self.truth.own_thread.items()}

    # -- files ------------------------------------------------------------------------------
    def write(self, directory: Path, *, legacy: bool = False, dma_packets: int = 300) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        directory.mkdir(parents=True, exist_ok=True)
        schema = pa.schema(
            [
                ("id", pa.int64()),
                ("name", pa.string()),
                ("start_ts", pa.int64()),
                ("end_ts", pa.int64()),
                ("duration_ns", pa.int64()),
                ("trace_event_source", pa.string()),
                ("instance_id", pa.string()),
                ("process_id", pa.int64()),
                ("thread_id", pa.int64()),
                ("nc_idx", pa.int64()),
                ("pcore_idx", pa.int64()),
                ("worker_gid", pa.int64()),
                ("flow_id", pa.list_(pa.string())),
                ("framework_stream_id", pa.string()),
                ("extra_attributes_json", pa.string()),
            ]
        )
        pq.write_table(
            pa.Table.from_pylist(self.events, schema=schema),
            directory / "SystemProfileEvents.parquet",
        )
        if self.hbm:
            pq.write_table(
                pa.Table.from_pylist(self.hbm), directory / "SystemProfileHbmUsage.parquet"
            )
        if self.cc:
            pq.write_table(pa.Table.from_pylist(self.cc), directory / "CcOp.parquet")
        queue = np.array(["input", "output", "data"])[np.arange(dma_packets) % 3]
        nbytes = (np.arange(dma_packets) % 7 + 1) * 512
        pq.write_table(
            pa.table(
                {
                    "start_ts": np.arange(dma_packets) * 100,
                    "end_ts": np.arange(dma_packets) * 100 + 50,
                    "transfer_bytes": nbytes,
                    "queue_type": queue,
                }
            ),
            directory / "DmaPacket.parquet",
        )
        pq.write_table(
            pa.table({"total_time": [0.0155], "dma_transfer_count": [dma_packets]}),
            directory / "Summary.parquet",
        )
        if legacy:
            self.write_legacy(directory / "system_profile.json")
        return directory

    def write_legacy(self, path: Path) -> Path:
        """The legacy JSON export's shape: parent_id names the framework op a runtime event
        belongs to (the flow's framework event)."""
        fw_of_flow = {}
        for ev in self.events:
            if ev["trace_event_source"] == "framework" and ev["flow_id"]:
                fw_of_flow[ev["flow_id"][0]] = ev["id"]
        out = []
        for ev in self.events:
            parent = None
            if ev["trace_event_source"] != "framework" and ev["flow_id"]:
                parent = fw_of_flow.get(ev["flow_id"][0])
            out.append(
                {
                    "name": ev["name"],
                    "timestamp": ev["start_ts"],
                    "duration": ev["duration_ns"],
                    "group": ev["trace_event_source"],
                    "id": ev["id"],
                    "parent_id": parent,
                    "instance_id": ev["instance_id"],
                    "process_id": ev["process_id"],
                    "thread_id": ev["thread_id"],
                    "lnc_idx": ev["nc_idx"],
                    "type": 99999 if ev["trace_event_source"] == "framework" else 11,
                }
            )
        path.write_text(json.dumps(out))
        return path


def build(
    executions: int = EXECUTIONS,
    seed: int = 0,
    streams: bool = False,
    hosts: tuple[Host, ...] = (Host(),),
) -> Fixture:
    return Fixture(executions, seed, streams, hosts).build()
