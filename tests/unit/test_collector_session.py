"""build_session_result: parse -> link -> window -> record buffer, without torch or a compiler."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest

from neuron_profiler.collectors import session as S
from neuron_profiler.trace import vocabulary as L

HOST_PID, TID = 4242, 42
W0, W1 = 1_000, 5_000


class _Trace:
    """Builds a system-trace payload in the documented shape, a few lines per event."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._tracking = 0

    def span(
        self, etype: str, core: int, start: int, stop: int, data: dict, tid: int = TID
    ) -> None:
        self._tracking += 1
        base = {
            "event_type": etype,
            "tracking_id": self._tracking,
            "nc_idx": core,
            "thread_id": tid,
        }
        self.events += [
            {**base, "phase": "start", "timestamp_ns": start, "data": data},
            {**base, "phase": "stop", "timestamp_ns": stop, "data": {}},
        ]

    def launch(
        self,
        core: int,
        exec_id: int,
        corr: int,
        t: int,
        etype: str,
        start: int,
        stop: int,
        ext: dict,
    ) -> None:
        """A host runtime call at t and the device work it launched."""
        self.span(
            "nrt_model_submit",
            core,
            t,
            t + 50,
            {"exec_id": exec_id, "neuron_profiler": {"op": ext.get("op"), "correlation_id": corr}},
        )
        self.span(
            etype,
            core,
            start,
            stop,
            {
                "exec_id": exec_id,
                "neuron_profiler": {
                    **ext,
                    "correlation_id": corr,
                    "launch_ns": t,
                    "modelled": True,
                },
            },
        )

    def payload(self) -> bytes:
        return json.dumps({"events": self.events, "data_version": 2}).encode()


@pytest.fixture()
def result() -> S.SessionResult:
    t = _Trace()
    t.launch(
        0,
        1,
        5,
        1_100,
        "nc_exec_running",
        1_300,
        2_300,
        {"op": "aten::mm", "flops": 2_000_000, "bytes": 1_000_000, "queue": "compute"},
    )
    t.launch(
        1,
        2,
        6,
        1_500,
        "dmem_buf_copyin",
        1_600,
        1_700,
        {"bytes": 4096, "direction": "h2d", "queue": "dma"},
    )
    t.launch(
        0,
        3,
        7,
        2_000,
        "cc_running",
        2_100,
        2_900,
        {"collective": "allreduce", "bytes": 8192, "ranks": [0, 1], "algorithm": "ring"},
    )
    t.span(
        "neuron_profiler.cpu_fallback",
        0,
        3_000,
        3_500,
        {
            "neuron_profiler": {
                "op": "aten::foo",
                "reason": "float64",
                "correlation_id": 8,
                "shapes": [[2, 2]],
                "dtypes": ["torch.float64"],
            }
        },
    )
    t.launch(0, 4, 9, 900, "nc_exec_running", 1_000, 1_400, {"op": "aten::add"})  # before window
    t.launch(0, 5, 10, 4_900, "nc_exec_running", 5_100, 6_000, {"op": "aten::relu"})  # ends after
    t.events.append(
        {
            "event_type": "hw_notify",
            "phase": "instant",
            "nc_idx": 1,
            "thread_id": 0,
            "timestamp_ns": 2_500,
            "data": {"value": 3},
        }
    )
    props = [
        {"id": 0, "name": "NeuronCore 0", "chip": "trn2", "emulated": True},
        {"id": 1, "name": "NeuronCore 1", "chip": "trn2", "emulated": True},
    ]
    return S.build_session_result(
        t.payload(),
        window=(W0, W1),
        intervals=S.Intervals.empty(),
        host_pid=HOST_PID,
        props=props,
        dropped={0: 3},
    )


def _rows(res: S.SessionResult) -> list[dict]:
    c = res.records.rows
    return [
        {
            "name": res.records.names[c["name_id"][i]],
            "type": int(c["kineto_type"][i]),
            "pid": int(c["pid"][i]),
            "tid": int(c["tid"][i]),
            "corr": int(c["external_id"][i]),
            "flow": int(c["flow_id"][i]),
            "flow_start": int(c["flow_start"][i]),
            "start": int(c["start_ns"][i]),
            "end": int(c["end_ns"][i]),
            "flops": int(c["flops"][i]),
            "bytes": int(c["bytes"][i]),
            "args": dict(res.records.args[c["args_id"][i]]) if c["args_id"][i] >= 0 else {},
        }
        for i in range(len(res.records))
    ]


def test_window_excludes_by_launch_time_and_counts(result: S.SessionResult) -> None:
    rows = _rows(result)
    assert result.excluded == 2  # the runtime call at 900 and its kernel
    assert result.metadata[L.META_EXCLUDED] == "2"
    assert not [r for r in rows if r["corr"] == 9]
    late = [r for r in rows if r["corr"] == 10 and r["type"] == S.KINETO_KERNEL]
    assert [(r["start"], r["end"]) for r in late] == [(5_100, 6_000)]  # finishes after: kept
    assert (
        len(rows) + result.excluded == result.source_count == 12
    )  # 5 launches x 2, fallback, hw_notify


def test_layout_process_per_core_thread_per_queue(result: S.SessionResult) -> None:
    by = {(r["name"], r["type"]): r for r in _rows(result)}
    mm = by[("NeuronCore: mm", S.KINETO_KERNEL)]  # no engine in this payload
    assert (mm["pid"], mm["tid"]) == (0, L.queue_stream(0, 0))
    dma = [r for r in _rows(result) if r["type"] == S.KINETO_MEMCPY]
    assert [(r["pid"], r["tid"], r["bytes"], r["args"][L.ARG_DIRECTION]) for r in dma] == [
        (1, L.queue_stream(1, 1), 4096, '"h2d"')
    ]
    assert [r["name"] for r in dma] == ["Memcpy HtoD (Host -> NeuronCore)"]
    cc = by[("CC: allreduce", S.KINETO_KERNEL)]
    assert cc["tid"] == L.queue_stream(0, 2) and cc["bytes"] == 8192
    assert cc["args"][L.ARG_GROUP_RANKS] == "[0,1]" and cc["args"][L.ARG_ALGORITHM] == '"ring"'
    assert cc["args"][L.ARG_IS_COLLECTIVE] == "true" and cc["args"][L.ARG_GROUP_SIZE] == "2"
    assert result.devices == [
        (0, L.core_sort_index(0), "NeuronCore 0", "trn2"),
        (1, L.core_sort_index(1), "NeuronCore 1", "trn2"),
    ]
    names = {(pid, tid): name for tid, _, pid, name in result.resources}
    assert names[(0, L.queue_stream(0, 0))] == "compute"
    assert names[(1, L.queue_stream(1, 1))] == "DMA"
    assert names[(0, L.queue_stream(0, 2))] == "collectives"
    assert names[(1, L.queue_stream(1, 3))] == "other"


def test_host_rows_on_launching_thread(result: S.SessionResult) -> None:
    host = [r for r in _rows(result) if r["type"] == S.KINETO_RUNTIME]
    assert {(r["pid"], r["tid"]) for r in host} == {(HOST_PID, TID)}
    fb = [r for r in host if r["name"].startswith(L.FALLBACK_PREFIX)]
    assert [r["name"] for r in fb] == ["CPU fallback: aten::foo"]
    assert fb[0]["args"][L.ARG_FALLBACK_REASON] == '"float64"' and fb[0]["corr"] == 8
    assert {r["name"] for r in host} - {fb[0]["name"]} == {
        "nrt launch: aten::mm",
        "nrt launch: aten::relu",
        "nrt_model_submit",
    }  # calls without an op (DMA, collective) keep the call's own name


def test_flows_pair_each_call_with_its_device_work(result: S.SessionResult) -> None:
    rows = _rows(result)
    starts = {r["flow"]: r for r in rows if r["flow"] and r["flow_start"]}
    ends = {r["flow"]: r for r in rows if r["flow"] and not r["flow_start"]}
    assert set(starts) == set(ends) and len(starts) == 4  # mm, dma, allreduce, relu
    for fid, s in starts.items():
        assert s["type"] == S.KINETO_RUNTIME and ends[fid]["corr"] == s["corr"]
        assert ends[fid]["start"] >= s["start"]


def test_unknown_event_kept_and_counts_reported(result: S.SessionResult) -> None:
    generic = [r for r in _rows(result) if r["name"] == "hw_notify"]
    assert len(generic) == 1 and generic[0]["type"] == S.KINETO_DRIVER
    assert json.loads(generic[0]["args"][L.ARG_DATA]) == {"value": 3}
    assert json.loads(result.metadata[L.META_DROPPED]) == {"0": 3}
    props = json.loads("[" + result.device_properties + "]")
    assert [p["name"] for p in props] == ["NeuronCore 0", "NeuronCore 1"]


def test_kernel_flops_and_bytes_columns(result: S.SessionResult) -> None:
    mm = [r for r in _rows(result) if r["name"] == "NeuronCore: mm"][0]
    assert (mm["flops"], mm["bytes"]) == (2_000_000, 1_000_000)
    assert mm["args"][L.ARG_EMULATED] == "true" and mm["args"][L.ARG_OP] == '"aten::mm"'


def test_empty_payload_gives_empty_buffer() -> None:
    res = S.build_session_result(
        b'{"events": [], "data_version": 2}',
        window=(0, 1),
        intervals=S.Intervals.empty(),
        host_pid=1,
        props=[],
    )
    assert len(res.records) == 0 and res.excluded == 0
    assert isinstance(res.records.rows, np.ndarray) and res.records.rows.dtype == S.RECORD
    assert all(len(res.records.rows[k]) == 0 for k in S.RECORD.names)


class _BadSource:
    name, links_by_correlation = "broken", True

    def start(self, max_events_per_nc: int, correlation) -> None:
        pass

    def stop(self) -> bytes:
        return b"this is not json"

    def device_properties(self) -> list[dict]:
        return []


def _no_source():
    from neuron_profiler.errors import CollectorUnavailableError

    raise CollectorUnavailableError("libnrt not loadable (no such file)")


def _stop(ctl: S.Controller) -> dict:
    return ctl.stop(0, 10, np.zeros((0, len(S.STACK_COLUMNS)), dtype=np.int64))


def test_bridge_interval_rows_become_intervals_by_column() -> None:
    # two (tid, id, parent, push_ns, pop_ns) rows as the bridge's stack hands them over
    stack = np.array([[11, 7, 0, 100, 900], [12, 8, 7, 200, 300]], dtype=np.int64)
    got = S.Intervals.from_stack(stack)
    assert got.tid.tolist() == [11, 12]
    assert got.correlation.tolist() == [7, 8]
    assert got.push_ns.tolist() == [100, 200] and got.pop_ns.tolist() == [900, 300]
    assert all(a.flags["C_CONTIGUOUS"] and a.dtype == np.int64 for a in vars(got).values())


def test_controller_without_source_warns_and_says_why() -> None:
    ctl = S.Controller(_no_source, correlation=None)
    with pytest.warns(UserWarning, match="libnrt not loadable"):
        ctl.start()
    out = _stop(ctl)
    assert len(out["records"]["rows"]["start_ns"]) == 0
    assert "libnrt not loadable" in json.loads(out["metadata"][L.META_LINK_ERROR])


def test_controller_bad_payload_names_the_source() -> None:
    from neuron_profiler.errors import TraceLoadError

    ctl = S.Controller(_BadSource, correlation=None)
    ctl.start()
    with pytest.raises(TraceLoadError, match="broken system-trace fetch output"):
        _stop(ctl)


def test_args_survive_kinetos_json_writer() -> None:
    """Kineto rewrites backslashes and drops newlines in args: values must never need them."""
    t = _Trace()
    t.span(
        "neuron_profiler.cpu_fallback",
        0,
        1_100,
        1_200,
        {
            "neuron_profiler": {
                "op": 'aten::"odd"',
                "reason": 'bad \\ "dtype"\nfloat64',
                "correlation_id": 1,
                "shapes": [[1]],
                "dtypes": ["torch.float64"],
            }
        },
    )
    t.events.append(
        {
            "event_type": "hw_notify",
            "phase": "instant",
            "nc_idx": 0,
            "thread_id": 1,
            "timestamp_ns": 1_300,
            "data": {"msg": 'tab\there "q"'},
        }
    )
    res = S.build_session_result(
        t.payload(), window=(W0, W1), intervals=S.Intervals.empty(), host_pid=1, props=[]
    )
    values = [v for args in res.records.args for _, v in args]
    assert values and all("\\" not in v and "\n" not in v for v in values)
    decoded = {k: json.loads(v) for args in res.records.args for k, v in args}
    assert decoded[L.ARG_FALLBACK_REASON] == "bad / 'dtype' float64"
    assert decoded[L.ARG_DATA] == {"msg": "tab here 'q'"}


class _DroppingSource(_BadSource):
    name = "emulator"

    def stop(self) -> bytes:
        return json.dumps(
            {
                "events": [],
                "data_version": 2,
                "neuron_profiler": {"dropped_events": {"0": 5, "1": 2}},
            }
        ).encode()


def test_ring_buffer_drops_give_one_warning_at_stop(recwarn: pytest.WarningsRecorder) -> None:
    ctl = S.Controller(_DroppingSource, correlation=None)
    ctl.start()
    _stop(ctl)
    messages = [str(w.message) for w in recwarn]
    assert messages == [
        "NEURON: 7 runtime events dropped (at most 7 activities); raise "
        "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC"
    ]


class _QuietSource(_BadSource):
    name = "emulator"

    def stop(self) -> bytes:
        return b'{"events": [], "data_version": 2}'


class _FakeTorchNeuronx:
    """What TorchNeuron exposes: the set of ops that ran on the CPU, names only."""

    def __init__(self, ops: object) -> None:
        self._ops = ops

    def get_fallback_ops(self) -> object:
        if isinstance(self._ops, Exception):
            raise self._ops
        return self._ops


def test_stop_writes_torch_neuronx_fallback_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch_neuronx importable, the trace metadata holds get_fallback_ops() (sorted),
    with a source and without one (the set is worth having either way)."""
    monkeypatch.setitem(
        sys.modules, "torch_neuronx", _FakeTorchNeuronx({"aten::nonzero", "aten::unique_dim"})
    )
    for ctl in (
        S.Controller(_QuietSource, correlation=None),
        S.Controller(_no_source, correlation=None),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctl.start()
            meta = _stop(ctl)["metadata"]
        assert json.loads(meta[L.META_FALLBACK_OPS]) == ["aten::nonzero", "aten::unique_dim"]
        assert ctl.last_result.metadata[L.META_FALLBACK_OPS] == meta[L.META_FALLBACK_OPS]


@pytest.mark.parametrize("module", [None, object()])
def test_no_fallback_set_without_torch_neuronx(
    monkeypatch: pytest.MonkeyPatch, module: object
) -> None:
    """torch_neuronx absent (None blocks the import) or without get_fallback_ops: no key, no
    warning."""
    monkeypatch.setitem(sys.modules, "torch_neuronx", module)
    ctl = S.Controller(_QuietSource, correlation=None)
    ctl.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert L.META_FALLBACK_OPS not in _stop(ctl)["metadata"]


def test_failing_fallback_query_warns_and_keeps_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch_neuronx", _FakeTorchNeuronx(RuntimeError("no NRT")))
    ctl = S.Controller(_QuietSource, correlation=None)
    ctl.start()
    with pytest.warns(UserWarning, match=r"get_fallback_ops\(\) failed .*no NRT"):
        out = _stop(ctl)
    assert L.META_FALLBACK_OPS not in out["metadata"] and L.META_SOURCE in out["metadata"]


def test_fallback_cost_is_args_not_numbers() -> None:
    """A fallback's flops and bytes are the op's device cost: args, with no achieved rate (the
    row's duration is host time)."""
    t = _Trace()
    t.span(
        "neuron_profiler.cpu_fallback",
        0,
        1_100,
        1_200,
        {
            "neuron_profiler": {
                "op": "aten::bincount",
                "reason": "r",
                "correlation_id": 1,
                "shapes": [[8]],
                "dtypes": ["int64"],
                "flops": 8,
                "bytes": 136,
                "dtype": "int64",
                "engine": "VectorE",
            }
        },
    )
    res = S.build_session_result(
        t.payload(), window=(W0, W1), intervals=S.Intervals.empty(), host_pid=1, props=[]
    )
    (row,) = _rows(res)
    assert (row["flops"], row["bytes"]) == (-1, -1)
    assert {
        k: json.loads(row["args"][k]) for k in (L.ARG_FLOPS, L.ARG_BYTES, L.ARG_DTYPE, L.ARG_ENGINE)
    } == {L.ARG_FLOPS: 8, L.ARG_BYTES: 136, L.ARG_DTYPE: "int64", L.ARG_ENGINE: "VectorE"}


def test_each_overhead_span_keeps_its_own_before_and_after() -> None:
    """Two dispatch-overhead spans of one op with different figures just outside them (the
    emulator's boundary and queries: host_cost.py): each row's args are its own (args are
    rendered once per distinct key; the figures belong to the key)."""
    t = _Trace()
    for start, before, after in ((2_000, 500, -100), (3_000, 700, -300)):
        ext = {"overhead": "dispatch", "op": "aten::add", "before_ns": before, "after_ns": after}
        t.span("neuron_profiler.emulator_overhead", 0, start, start + 200, {"neuron_profiler": ext})
    res = S.build_session_result(
        t.payload(), window=(W0, W1), intervals=S.Intervals.empty(), host_pid=HOST_PID, props=[]
    )
    got = [  # (the bridge's args are JSON text)
        (
            r["start"],
            json.loads(r["args"][L.ARG_OVERHEAD_BEFORE]),
            json.loads(r["args"][L.ARG_OVERHEAD_AFTER]),
        )
        for r in _rows(res)
    ]
    assert sorted(got) == [(2_000, 500, -100), (3_000, 700, -300)]
