"""A synthetic Neuron Explorer profile (tests/explorer_fixture.py: the documented columns, the
workshop's event mix) read and placed: every event where the generator put it, linked to the
op the generator says, with its bytes; HBM counters that add up to the samples' totals."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer_fixture import EVENT_MIX, FRAMEWORK_EVENTS, HOST_TID, PID, build  # noqa: E402
from explorer_support import require_pyarrow  # noqa: E402

from neuron_profiler.runtime_trace.activities import ActivityKind  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    require_pyarrow()
    fx = build()
    return fx, fx.write(tmp_path_factory.mktemp("profile"), legacy=True)


@pytest.fixture(scope="module")
def result(fixture):  # noqa: ANN001, ANN201
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    return profile_trace(read_profile(fixture[1]))


def _placed_by_event(result, fx):  # noqa: ANN001, ANN202
    """Explorer event id of each placed row (the generator numbers events from 1 in row order)."""
    placed = result.merge.placed
    main = placed.kind != ActivityKind.GRAPH_OP
    event_row = result.converted.event_row[placed.activity[main]]
    return placed.records[main], event_row + 1


def test_reads_the_documented_mix(fixture) -> None:  # noqa: ANN001
    from neuron_profiler.explorer.reader import read_profile

    profile = read_profile(fixture[1])
    ev = profile.events
    names = Counter(np.asarray(ev.names, dtype=object)[ev.name_code][ev.source != 2].tolist())
    assert dict(names) == EVENT_MIX
    assert int((ev.source == 2).sum()) == FRAMEWORK_EVENTS
    assert len(ev) == 9634 and profile.malformed == 0
    assert profile.dma_packets == {"input": 100, "output": 100, "data": 100}
    assert sum(profile.dma_bytes.values()) == sum((i % 7 + 1) * 512 for i in range(300))


def test_every_event_placed_exactly_where_the_generator_put_it(fixture, result) -> None:  # noqa: ANN001
    fx = fixture[0]
    records, ids = _placed_by_event(result, fx)
    assert len(ids) == sum(EVENT_MIX.values()) and len(set(ids.tolist())) == len(ids)
    names = result.trace.process_names
    for rec, eid in zip(records, ids.tolist(), strict=True):
        start, end = fx.truth.span[eid]
        assert (rec["start_ns"], rec["end_ns"]) == (start, end)
        if eid in fx.truth.host:  # runtime calls and exec stages: their own host thread
            assert (rec["pid"], rec["tid"]) == (PID, fx.truth.host[eid])
        else:  # device work and everything else: the generator's core
            core = fx.truth.core[eid]
            assert names[int(rec["pid"])].startswith(f"NeuronCore {core} (i-0synthetic")
            assert f"worker {100 + core}" in names[int(rec["pid"])]


def test_links_follow_flows_exec_ids_and_containment(fixture, result) -> None:  # noqa: ANN001
    fx = fixture[0]
    records, ids = _placed_by_event(result, fx)
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    want = {e: x for e, x in fx.truth.external.items() if e in got}
    assert len(want) == 40 + 40 + 720 + 585 + 1467  # stages, executions, collectives, calls, copies
    assert {e: got[e] for e in want} == want
    # the exec stages sit on a thread with no framework op: only their flow links them
    assert result.arrows == 40


def test_bytes_of_copies_and_collectives(fixture, result) -> None:  # noqa: ANN001
    fx = fixture[0]
    records, ids = _placed_by_event(result, fx)
    got = dict(zip(ids.tolist(), records["bytes"].tolist(), strict=True))
    assert {e: got[e] for e in fx.truth.nbytes} == fx.truth.nbytes
    assert result.converted.unmatched_cc == 0


def test_hbm_counters_add_up_to_the_totals(fixture, result) -> None:  # noqa: ANN001
    import msgspec

    fx = fixture[0]
    t = result.trace
    rows = np.flatnonzero(t.columns[S.PH] == S.Phase.COUNTER)
    assert len(rows) == len(fx.truth.hbm_total) == 982
    sums = [sum(msgspec.json.decode(t.raw_args[t.columns[S.ARGS_ROW][r]]).values()) for r in rows]
    times = t.columns[S.TS_NS][rows]
    want = sorted(zip([h["timestamp"] for h in fx.hbm], fx.truth.hbm_total, strict=True))
    assert sorted(zip(times.tolist(), sums, strict=True)) == want
    names = {t.strings[t.columns[S.NAME_ID][r]] for r in rows}
    assert names == {V.hbm_counter_name(0), V.hbm_counter_name(1)}
    assert result.hbm_mismatched == 0


def test_chrome_and_perfetto_exports_keep_every_slice_and_flow(fixture, result, tmp_path) -> None:  # noqa: ANN001
    from neuron_profiler.exporters.writers import write_trace
    from neuron_profiler.trace import load_trace

    write_trace(result.trace, tmp_path / "p.json")
    back = load_trace(tmp_path / "p.json")
    ph = back.columns[S.PH]
    assert int((ph == S.Phase.COMPLETE).sum()) == sum(EVENT_MIX.values()) + FRAMEWORK_EVENTS
    assert int((ph == S.Phase.FLOW_START).sum()) == int((ph == S.Phase.FLOW_END).sum())
    assert int((ph == S.Phase.FLOW_START).sum()) == 585 + 40
    written = write_trace(result.trace, tmp_path / "p.pftrace")
    r = written.result
    assert r.slices == sum(EVENT_MIX.values()) + FRAMEWORK_EVENTS - 4800  # instants: instants
    assert r.flows == 625 and r.unbound_flow_endpoints == 0 and r.orphan_flow_endpoints == 0


def test_on_a_host_trace_links_go_to_the_host_ops(fixture) -> None:  # noqa: ANN001
    """The same framework ops recorded by torch.profiler with their own External ids: device
    work links to the host op, whatever the profile's own framework events were numbered."""
    from neuron_profiler.explorer.profile_trace import merge_profile
    from neuron_profiler.explorer.reader import read_profile
    from neuron_profiler.trace.model import TraceBuilder

    fx, directory = fixture
    b = TraceBuilder("host.json")
    host_id = {}
    for k, eid in enumerate(fx.truth.framework_ids):
        ev = fx.events[eid - 1]
        host_id[fx.truth.external[eid]] = 50_000 + k
        b.add(
            name=ev["name"],
            ts_ns=ev["start_ts"],
            dur_ns=ev["end_ts"] - ev["start_ts"],
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=PID,
            tid=HOST_TID,
            args={"External id": 50_000 + k},
        )
    res = merge_profile(b.build(), read_profile(directory))
    records, ids = _placed_by_event(res, fx)
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    want = {e: host_id[x] for e, x in fx.truth.external.items() if e in got}
    assert {e: got[e] for e in want} == want
    meta = res.trace.metadata[V.META_EXPLORER]
    assert meta["framework_events_superseded_by_host_trace"] == FRAMEWORK_EVENTS


def test_legacy_json_export_places_the_same_events(fixture) -> None:  # noqa: ANN001
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    fx, directory = fixture
    res = profile_trace(read_profile(directory / "system_profile.json"))
    records, ids = _placed_by_event(res, fx)
    assert len(ids) == sum(EVENT_MIX.values())
    for rec, eid in zip(records, ids.tolist(), strict=True):
        assert (rec["start_ns"], rec["end_ns"]) == fx.truth.span[eid]
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    stages = [e for e, h in fx.truth.host.items() if h != HOST_TID]
    assert {e: got[e] for e in stages} == {e: fx.truth.external[e] for e in stages}
    assert res.trace.metadata[V.META_EXPLORER]["legacy_json"] is True


def _dictionary_encoded(table):  # noqa: ANN001, ANN202
    """``table`` with every string column, the strings inside ``flow_id`` and ``process_id``
    dictionary-encoded, as Parquet writers commonly store them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def encoded(col):  # noqa: ANN001, ANN202
        col = col.combine_chunks()
        if pa.types.is_list(col.type):
            values = pc.dictionary_encode(col.values)
            return pa.ListArray.from_arrays(col.offsets, values, mask=col.is_null())
        return pc.dictionary_encode(col)

    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or f.name in ("flow_id", "process_id"):
            table = table.set_column(i, f.name, encoded(table[f.name]))
    return table


def test_dictionary_encoded_columns_read_as_their_values(tmp_path) -> None:  # noqa: ANN001
    """Split in two parts, the first dictionary-encoded, the second plain: read, placed and
    linked exactly as the generator wrote it, nothing counted as malformed."""
    require_pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    fx = build(executions=2)
    directory = fx.write(tmp_path / "p")
    events = directory / "SystemProfileEvents.parquet"
    table = pq.read_table(events)
    events.unlink()
    half = len(table) // 2
    pq.write_table(_dictionary_encoded(table.slice(0, half)), directory / "SystemProfileEvents_0.parquet")  # fmt: skip
    pq.write_table(table.slice(half), directory / "SystemProfileEvents_1.parquet")
    first = pq.read_schema(directory / "SystemProfileEvents_0.parquet")
    assert pa.types.is_dictionary(first.field("extra_attributes_json").type)
    assert pa.types.is_dictionary(first.field("flow_id").type.value_type)
    res = profile_trace(read_profile(directory))
    records, ids = _placed_by_event(res, fx)
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    assert {e: got[e] for e in fx.truth.external if e in got} == {
        e: x for e, x in fx.truth.external.items() if e in got
    }
    assert len(got) == len(fx.events) - len(fx.truth.framework_ids)
    nbytes = dict(zip(ids.tolist(), records["bytes"].tolist(), strict=True))
    assert {e: nbytes[e] for e in fx.truth.nbytes} == fx.truth.nbytes
    for rec, eid in zip(records, ids.tolist(), strict=True):
        assert (rec["start_ns"], rec["end_ns"]) == fx.truth.span[eid]
    assert res.trace.metadata[V.META_MALFORMED] == 0


def test_ids_quoted_as_integers_link_as_integers(tmp_path) -> None:  # noqa: ANN001
    """Every ``exec_id`` and ``op_id`` written as text ("1"): device work links to its execution
    and collectives get their CcOp bytes exactly as with integers; nothing is malformed."""
    import json

    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    fx = build(executions=2)
    quoted = 0
    for ev in fx.events:
        attrs = json.loads(ev["extra_attributes_json"] or "{}")
        for key in ("exec_id", "op_id"):
            if key in attrs:
                attrs[key] = str(attrs[key])
                quoted += 1
        ev["extra_attributes_json"] = json.dumps(attrs)
    assert quoted > 100
    res = profile_trace(read_profile(fx.write(tmp_path / "p")))
    records, ids = _placed_by_event(res, fx)
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    want = {e: x for e, x in fx.truth.external.items() if e in got}
    assert {e: got[e] for e in want} == want
    nbytes = dict(zip(ids.tolist(), records["bytes"].tolist(), strict=True))
    assert {e: nbytes[e] for e in fx.truth.nbytes} == fx.truth.nbytes
    assert res.trace.metadata[V.META_MALFORMED] == 0


def test_ids_that_are_not_integers_are_counted_and_dropped() -> None:
    """Worked by hand: an id is an integer of int64 or exactly its digits as text (an optional
    minus, at most 18 digits); anything else is dropped and its row counted once."""
    from neuron_profiler.explorer.reader import decode_attributes

    rows = [
        b'{"exec_id": 5, "op_id": "12"}',  # 5, op 12
        b'{"exec_id": "007"}',  # 7
        b'{"nrt_sequence_id": "-3"}',  # seq -3: text of a negative integer (no id, not odd)
        b'{"exec_id": " 1"}',  # spaces: counted
        b'{"exec_id": "1.0", "op_id": 4}',  # not an integer: counted, op 4 kept
        b'{"exec_id": "1_0"}',  # Python would read it, JSON producers do not write it: counted
        b'{"exec_id": "9999999999999999999"}',  # 19 digits: counted
        b'{"exec_id": 9223372036854775808}',  # beyond int64: counted
        b'{"exec_id": 2.5, "op_id": 3}',  # a float: counted, op 3 kept
        b'{"exec_id": true}',  # a bool: counted
        b"[1]",  # no object: counted, attributes {}
        b"{}",
    ]
    attrs, exec_id, seq, op, bad = decode_attributes(rows)
    assert exec_id.tolist() == [5, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1]
    assert op.tolist() == [12, -1, -1, -1, 4, -1, -1, -1, 3, -1, -1, -1]
    assert seq.tolist() == [-1, -1, -3, -1, -1, -1, -1, -1, -1, -1, -1, -1]
    assert bad == 8
    assert attrs[10] == b"{}" and attrs[:10] == rows[:10]
    _, exec_id, seq, op, bad = decode_attributes([b'{"exec_id": 1, "nrta_seq_id": 2}', b"{}"])
    assert (exec_id.tolist(), seq.tolist(), op.tolist(), bad) == ([1, -1], [2, -1], [-1, -1], 0)


def test_required_values_missing_are_counted_and_what_they_unlink_too(tmp_path) -> None:  # noqa: ANN001
    """Framework ops written without a thread (a required column): kept, but no call can be in
    them, so the tensor calls they hold, and those calls' copies, go unlinked; every null is
    counted, as is every call left unlinked. Flows still link the executions' stages and device
    work. An event missing two required values counts once."""
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    require_pyarrow()
    fx = build(executions=2)
    for e in fx.truth.framework_ids:
        fx.events[e - 1]["thread_id"] = None
    calls = {e for e, h in fx.truth.host.items() if h == HOST_TID}  # the tensor calls
    call_ops = {fx.truth.external[c] for c in calls}  # the copy_ ops around them
    free = next(e for e, ev in enumerate(fx.events, 1) if ev["name"] == "nrt_tensor_free")
    fx.events[free - 1].update(name=None, thread_id=None)  # two nulls, one event
    res = profile_trace(read_profile(fx.write(tmp_path / "p")))
    meta = res.trace.metadata[V.META_EXPLORER]
    n_fw = len(fx.truth.framework_ids)
    assert meta["events_with_null_required_values"] == {"thread_id": n_fw + 1, "name": 1}
    assert meta["framework_events_without_thread"] == n_fw
    assert meta["runtime_calls_unlinked"] == len(calls) > 0
    assert res.trace.metadata[V.META_MALFORMED] == n_fw + 1
    records, ids = _placed_by_event(res, fx)
    got = dict(zip(ids.tolist(), records["external_id"].tolist(), strict=True))
    unlinked = {e for e in got if fx.truth.external.get(e) in call_ops}  # calls, copies
    assert len(unlinked) > len(calls)
    assert {got[e] for e in unlinked} == {0}
    linked = {e: x for e, x in fx.truth.external.items() if e in got and e not in unlinked}
    assert len(linked) == 4 + 4 + 72  # stages (flows), executions and collectives (exec_id)
    assert {e: got[e] for e in linked} == linked
    cpu_ops = res.trace.columns[S.KIND] == S.EventKind.CPU_OP
    assert int(cpu_ops.sum()) == n_fw  # nothing dropped
