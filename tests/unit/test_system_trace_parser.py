"""System-trace parsing: pairing, clock mapping, unknown types kept, malformed counted."""

from __future__ import annotations

import bisect
import json
import random

import msgspec
import pytest

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind, Queue
from neuron_profiler.runtime_trace.parser import (
    decode_rows,
    parse_system_trace,
    parse_system_traces,
)

HOST0 = 1_700_000_000_000_000_000


def _ev(event_type: str, phase: str, ts: int, tracking: int | None = None, **data) -> dict:
    ev = {
        "event_type": event_type,
        "phase": phase,
        "timestamp_ns": ts,
        "nc_idx": 1,
        "thread_id": 77,
        "data": data,
    }
    if tracking is not None:
        ev["tracking_id"] = tracking
    return ev


def _payload(events: list) -> bytes:
    return json.dumps({"events": events, "data_version": 2}).encode()


def test_pairs_maps_device_clock_and_keeps_extension() -> None:
    ext = {
        F.EXT_KEY: {F.X_OP: "aten::mm", F.X_FLOPS: 10, F.X_CORRELATION_ID: 5, F.X_MODELLED: True}
    }
    events = [
        _ev(
            F.TIMESTAMP_SYNC_POINT,
            F.INSTANT,
            HOST0,
            exec_id=1,
            nc_timestamp_ns=1000,
            cpu_timestamp_ns=HOST0,
        ),
        _ev(F.NC_EXEC_RUNNING, F.STOP, HOST0 + 999, 9, nc_timestamp_ns=1600, exec_id=1),
        _ev(F.NC_EXEC_RUNNING, F.START, HOST0 + 1, 9, nc_timestamp_ns=1500, exec_id=1, **ext),
    ]
    acts = parse_system_trace(_payload(events))
    assert len(acts) == 1 and acts.unpaired == 0 and acts.malformed == 0
    assert acts.start_ns[0] == HOST0 + 500 and acts.end_ns[0] == HOST0 + 600
    assert acts.kind[0] == ActivityKind.KERNEL and acts.queue[0] == Queue.COMPUTE
    assert acts.names[acts.name_id[0]] == "aten::mm"
    assert acts.correlation_id[0] == 5 and acts.modelled[0] and acts.exec_id[0] == 1
    assert json.loads(acts.data[0])[F.EXT_KEY][F.X_FLOPS] == 10


def test_unknown_types_kept_malformed_and_unpaired_counted() -> None:
    events = [
        _ev("hw_notify", F.INSTANT, HOST0 + 5, foo=1),
        _ev("some_future_event", F.START, HOST0 + 6, 3),
        _ev("some_future_event", F.STOP, HOST0 + 16, 3),
        _ev(F.CC_RUNNING, F.START, HOST0 + 20, 4),  # stop never comes
        _ev(F.DMEM_BUF_COPYIN, F.STOP, HOST0 + 30, 8),  # start lost
        {"event_type": F.NC_EXEC_RUNNING, "timestamp_ns": "soon"},  # mistyped
        {"phase": "start"},  # missing keys
    ]
    acts = parse_system_trace(_payload(events))
    assert acts.malformed == 2 and acts.unpaired == 2
    assert len(acts) == 4  # nothing usable dropped: instant, generic pair, two halves
    kinds = sorted(int(k) for k in acts.kind)
    assert kinds == sorted(
        [ActivityKind.INSTANT, ActivityKind.GENERIC, ActivityKind.COLLECTIVE, ActivityKind.DMA]
    )
    generic = list(acts.kind).index(ActivityKind.GENERIC)
    assert acts.end_ns[generic] - acts.start_ns[generic] == 10


# --- clock mapping: expectations written from the documented rule -------------------------------
# host_ns = sync.cpu_timestamp_ns + (event.nc_timestamp_ns - sync.nc_timestamp_ns), with the sync
# point of the same core and exec_id when there is one, else the core's latest one at or before.


def _sync(ts: int, core: int, exec_id: int, nc: int, cpu: int) -> dict:
    ev = _ev(
        F.TIMESTAMP_SYNC_POINT,
        F.INSTANT,
        ts,
        exec_id=exec_id,
        nc_timestamp_ns=nc,
        cpu_timestamp_ns=cpu,
    )
    ev["nc_idx"] = core
    return ev


def _kernel(
    ts: int, tracking: int, core: int, exec_id: int, nc_start: int, nc_stop: int
) -> list[dict]:
    out = [
        _ev(F.NC_EXEC_RUNNING, F.START, ts, tracking, exec_id=exec_id, nc_timestamp_ns=nc_start),
        _ev(F.NC_EXEC_RUNNING, F.STOP, ts + 1, tracking, exec_id=exec_id, nc_timestamp_ns=nc_stop),
    ]
    for ev in out:
        ev["nc_idx"] = core
    return out


def _by_exec(acts) -> dict[int, tuple[int, int]]:
    return {
        int(e): (int(s), int(t))
        for e, s, t in zip(acts.exec_id, acts.start_ns, acts.end_ns, strict=True)
    }


def test_sync_point_of_same_exec_id_wins_over_latest() -> None:
    events = [
        _sync(HOST0, 1, 1, nc=1_000, cpu=HOST0 + 7),
        _sync(HOST0 + 50, 1, 2, nc=900_000, cpu=HOST0 + 200_000),  # later, other exec
        *_kernel(HOST0 + 60, 1, 1, 1, nc_start=1_500, nc_stop=1_900),  # exec 1 -> first sync
        *_kernel(HOST0 + 70, 2, 1, 2, nc_start=900_100, nc_stop=900_400),  # exec 2 -> second
        *_kernel(HOST0 + 80, 3, 1, 7, nc_start=900_500, nc_stop=900_600),  # no exec 7: latest
        *_kernel(HOST0 + 90, 4, 1, 3, nc_start=5, nc_stop=9),  # exec 3's sync comes later
        _sync(HOST0 + 95, 1, 3, nc=0, cpu=HOST0 + 1_000_000),
    ]
    acts = parse_system_trace(_payload(events))
    got = _by_exec(acts)
    assert got[1] == (HOST0 + 7 + 500, HOST0 + 7 + 900)
    assert got[2] == (HOST0 + 200_000 + 100, HOST0 + 200_000 + 400)
    # exec 7 has no sync point of its own: the core's clock, extrapolated from the last two
    slope = (200_000 - 7) / (900_000 - 1_000)
    assert got[7] == (HOST0 + 200_000 + round(500 * slope), HOST0 + 200_000 + round(600 * slope))
    assert got[3] == (HOST0 + 1_000_000 + 5, HOST0 + 1_000_000 + 9)
    assert len(acts) == 4 and acts.unpaired == 0 and acts.malformed == 0


def test_sync_points_are_per_core_and_need_both_stamps() -> None:
    events = [
        _sync(HOST0, 0, 1, nc=0, cpu=HOST0 + 123_456),  # core 0 only
        _sync(HOST0 + 1, 1, 1, nc=10, cpu=None),  # unusable: no cpu stamp -> malformed
        *_kernel(HOST0 + 5, 1, 1, 1, nc_start=40, nc_stop=70),  # core 1: nothing to map with
        *_kernel(HOST0 + 6, 2, 0, 1, nc_start=40, nc_stop=70),
    ]
    events[1]["data"].pop("cpu_timestamp_ns")
    acts = parse_system_trace(_payload(events))
    assert acts.malformed == 1 and len(acts) == 1
    rows = {
        int(c): (int(s), int(e))
        for c, s, e in zip(acts.core, acts.start_ns, acts.end_ns, strict=True)
    }
    assert rows[0] == (HOST0 + 123_456 + 40, HOST0 + 123_456 + 70)
    assert acts.unmapped == 2  # core 1: never placed on its raw device stamps


def test_a_drifting_clock_is_interpolated_between_sync_points() -> None:
    """Device time runs at 1/50 of host time here: between two sync points the mapping follows
    the line through them, and past the last one it extrapolates the same line."""
    events = [
        _sync(HOST0, 1, 0, nc=0, cpu=HOST0),
        *_kernel(HOST0 + 100, 1, 1, 5, nc_start=100, nc_stop=200),
        _sync(HOST0 + 150, 1, 0, nc=1_000, cpu=HOST0 + 50_000),  # re-sync (drift)
        *_kernel(HOST0 + 200, 2, 1, 6, nc_start=1_100, nc_stop=1_300),
    ]
    got = _by_exec(parse_system_trace(_payload(events)))
    assert got[5] == (HOST0 + 5_000, HOST0 + 10_000)
    assert got[6] == (HOST0 + 55_000, HOST0 + 65_000)


# --- envelopes, several fetches, drops -----------------------------------------------------------


def _env(events: list, dropped: dict | None = None) -> dict:
    env = {"events": events, "data_version": 2}
    if dropped is not None:
        env["neuron_profiler"] = {"dropped_events": dropped, "emulated": True}
    return env


def test_concatenated_and_listed_envelopes_pair_across_fetches() -> None:
    first = _env([_ev(F.CC_RUNNING, F.START, HOST0 + 10, 5)], {"1": 2})
    second = _env(
        [_ev(F.CC_RUNNING, F.STOP, HOST0 + 30, 5), _ev("hw_notify", F.INSTANT, HOST0 + 40)],
        {"1": 3, "0": 1},
    )
    concatenated = (json.dumps(first) + "\n" + json.dumps(second)).encode()
    listed = json.dumps([first, second]).encode()
    for payload in (concatenated, listed):
        acts = parse_system_trace(payload)
        assert len(acts) == 2 and acts.unpaired == 0
        cc = list(acts.kind).index(ActivityKind.COLLECTIVE)
        assert (acts.start_ns[cc], acts.end_ns[cc]) == (HOST0 + 10, HOST0 + 30)
        assert acts.dropped == {1: 5, 0: 1}  # per-fetch counts add up
    split = parse_system_traces([json.dumps(first), json.dumps(second).encode()])
    assert len(split) == 2 and split.unpaired == 0 and split.dropped == {1: 5, 0: 1}
    assert parse_system_trace(concatenated, dropped={3: 9}).dropped == {3: 9}  # out of band


def test_not_json_or_not_an_envelope_raises() -> None:
    for bad in (b"{nope", b'{"foo": 1}', b"[1, 2]", b'{"events": 3}'):
        with pytest.raises(msgspec.DecodeError):
            parse_system_trace(bad)


def test_pairing_edge_cases_keep_and_count_every_half() -> None:
    events = [
        _ev(F.NC_EXEC_RUNNING, F.START, HOST0 + 1, 1),
        _ev(F.NC_EXEC_RUNNING, F.START, HOST0 + 2, 1),  # same key again: the first is unpaired
        _ev(F.NC_EXEC_RUNNING, F.STOP, HOST0 + 5, 1),
        _ev(F.NC_EXEC_RUNNING, F.STOP, HOST0 + 6, 1),  # second stop: unpaired
        _ev(F.DMEM_BUF_COPYIN, F.STOP, HOST0 + 7, 1),  # same tracking id, other type: no pair
        _ev(F.NRT_MODEL_SUBMIT, F.START, HOST0 + 8),  # no tracking id: a point, not unpaired
    ]
    acts = parse_system_trace(_payload(events))
    assert acts.unpaired == 3 and len(acts) == 5
    spans = sorted(
        (int(s - HOST0), int(e - HOST0)) for s, e in zip(acts.start_ns, acts.end_ns, strict=True)
    )
    assert spans == [(1, 1), (2, 5), (6, 6), (7, 7), (8, 8)]


def test_mistyped_events_in_a_large_payload_are_counted_exactly() -> None:
    good = []
    for i in range(6000):
        good += [
            _ev(F.NC_EXEC_RUNNING, F.START, HOST0 + 10 * i, i, exec_id=i),
            _ev(F.NC_EXEC_RUNNING, F.STOP, HOST0 + 10 * i + 5, i, exec_id=i),
        ]
    bad = [
        {"event_type": F.NC_EXEC_RUNNING, "timestamp_ns": 1.5},
        {"event_type": 7, "timestamp_ns": 1},
        {"event_type": "x", "timestamp_ns": 2**70},
        {"event_type": "x", "timestamp_ns": 1, "data": [1]},
        "not an object",
    ]
    mixed = list(good)
    for j, ev in enumerate(bad):
        mixed.insert(1 + 2500 * j, ev)
    clean = parse_system_trace(_payload(good))
    acts = parse_system_trace(_payload(mixed))
    assert acts.malformed == len(bad) and clean.malformed == 0
    assert len(acts) == len(clean) == 6000
    assert (acts.start_ns == clean.start_ns).all() and (acts.end_ns == clean.end_ns).all()
    assert (acts.exec_id == clean.exec_id).all()


def _reference(events: list[dict]) -> list[tuple]:
    """The documented rules as a plain loop (independent of the vectorised parser)."""
    evs = sorted(enumerate(events), key=lambda p: (p[1]["timestamp_ns"], p[0]))
    syncs = [(i, e) for i, e in evs if e["event_type"] == F.TIMESTAMP_SYNC_POINT]

    def host(i: int, e: dict) -> int | None:
        nc = e["data"].get("nc_timestamp_ns")
        if nc is None:
            return e["timestamp_ns"]
        core = [(j, s["data"]) for j, s in syncs if s["nc_idx"] == e["nc_idx"]]
        same = [
            (j, s)
            for j, s in core
            if "exec_id" in e["data"] and s["exec_id"] == e["data"]["exec_id"]
        ]
        before = sorted((s["nc_timestamp_ns"], j, s) for j, s in same if s["nc_timestamp_ns"] <= nc)
        after = sorted((s["nc_timestamp_ns"], j, s) for j, s in same if s["nc_timestamp_ns"] > nc)
        if before or after:
            s = before[-1][2] if before else after[0][2]
            return s["cpu_timestamp_ns"] + (nc - s["nc_timestamp_ns"])
        points: dict[int, int] = {}
        for _, s in sorted(core, key=lambda p: p[0]):  # the first sync point of a stamp wins
            points.setdefault(s["nc_timestamp_ns"], s["cpu_timestamp_ns"])
        if not points:
            return None  # no sync point on the core: unmapped, left out
        ncs = sorted(points)
        if len(ncs) == 1:
            return points[ncs[0]] + (nc - ncs[0])
        k = min(max(bisect.bisect_right(ncs, nc) - 1, 0), len(ncs) - 2)
        a, b = ncs[k], ncs[k + 1]
        return points[a] + round((nc - a) * ((points[b] - points[a]) / (b - a)))

    rows, open_ = [], {}
    for i, e in evs:
        if e["event_type"] == F.TIMESTAMP_SYNC_POINT or host(i, e) is None:
            continue
        t = host(i, e)
        key = (e["event_type"], e.get("tracking_id"))
        phase = e.get("phase")
        if phase == F.START and key[1] is not None:
            if key in open_:
                rows.append((open_[key][1], open_[key][1], open_[key][0]))
            open_[key] = (e, t)
        elif phase == F.STOP and key[1] is not None and key in open_:
            start, st = open_.pop(key)
            rows.append((st, max(t, st), start))
        else:
            rows.append((t, t, e))
    rows += [(st, st, e) for e, st in open_.values()]
    return sorted(
        (
            s,
            t,
            e["event_type"],
            e["nc_idx"],
            e["data"].get("exec_id", -1),
            json.dumps(e["data"], sort_keys=True),
        )
        for s, t, e in rows
    )


# Phases other than start/stop (the runtime's "instant", a future value, a different case, none
# at all) are points; a mistyped event is dropped and counted, and sends the parser down its
# slow (event-by-event) path, whose row data must match the fast path's.
_ODD_PHASES = (F.INSTANT, "begin", "", "Stop", None)
_MISTYPED = (
    {"event_type": F.NC_EXEC_RUNNING, "timestamp_ns": "soon"},
    {"event_type": "x", "phase": 3, "timestamp_ns": 1},
)


def test_random_streams_match_the_documented_rules() -> None:
    rng = random.Random(3)
    for trial in range(30):
        events, malformed = [], 0
        for k in range(rng.randrange(1, 120)):
            core, ts = rng.randrange(3), HOST0 + rng.randrange(0, 10_000)
            etype = rng.choice([F.NC_EXEC_RUNNING, F.CC_RUNNING, F.NRT_MODEL_SUBMIT, "x_new"])
            roll = rng.random()
            if roll < 0.15:
                ev = _sync(ts, core, rng.randrange(4), rng.randrange(10**6), HOST0 + k * 1000)
            elif roll < 0.17 and trial % 2:
                events.append(dict(rng.choice(_MISTYPED)))
                malformed += 1
                continue
            else:
                data = {"exec_id": rng.randrange(4), "note": rng.choice(["a", "é", 'q"'])}
                if rng.random() < 0.6:
                    data["nc_timestamp_ns"] = rng.randrange(10**6)
                phase = rng.choice([F.START, F.STOP, F.STOP, *_ODD_PHASES])
                ev = _ev(etype, phase, ts, rng.randrange(6), **data)
                if phase is None:
                    del ev["phase"]
                ev["nc_idx"] = core
            events.append(ev)
        acts = parse_system_trace(_payload(events))
        assert acts.malformed == malformed
        good = [e for e in events if isinstance(e.get("data"), dict)]
        got = sorted(
            (
                int(s),
                int(e),
                _type_of(acts, i),
                int(c),
                int(x),
                json.dumps(json.loads(acts.data[i]), sort_keys=True),
            )
            for i, (s, e, c, x) in enumerate(
                zip(acts.start_ns, acts.end_ns, acts.core, acts.exec_id, strict=True)
            )
        )
        assert got == _reference(good)


def test_row_data_is_read_on_first_use_and_behaves_as_a_sequence() -> None:
    events = [
        _ev("x_new", F.INSTANT, HOST0 + i, note=f"row {i}", nested={"k": [i]}) for i in range(5)
    ]
    for payload in (_payload(events), _payload([*events, _MISTYPED[0]])):  # fast, slow path
        acts = parse_system_trace(payload)
        assert "not read yet" in repr(acts.data) and len(acts.data) == 5
        rows = [json.loads(d) for d in acts.data]
        assert rows == [e["data"] for e in events]  # one row per event, in time order
        assert "not read yet" not in repr(acts.data)
        assert acts.data[-1] == list(acts.data)[4] and acts.data == list(acts.data)
        assert all(isinstance(d, bytes) for d in acts.data)


def _type_of(acts, i: int) -> str:
    """Event type of row i from its name (no extension op names in the random streams)."""
    return acts.names[acts.name_id[i]]


class _RowNote(msgspec.Struct):
    note: str = "none"
    nested: dict = {}


def test_decode_rows_matches_decoding_each_rows_bytes() -> None:
    events = [
        _ev("x_new", F.INSTANT, HOST0 + i, note=f"row {i}", nested={"k": [i]}) for i in range(4)
    ]
    events.append({"event_type": "x_new", "phase": F.INSTANT, "timestamp_ns": HOST0 + 9})  # no data
    sync = _sync(HOST0 + 2, 1, 0, nc=5, cpu=HOST0)  # consumed: not a row
    odd_sync = _sync(HOST0 + 2, 1, 0, nc=5, cpu=HOST0)
    odd_sync["data"]["note"] = 5  # does not fit the row type: only the rows' data must
    for extra, one_pass in ((sync, True), (odd_sync, False)):
        stream = [*events[:2], extra, *events[2:]]
        for payload in (_payload(stream), _payload([*stream, _MISTYPED[0]])):  # fast, slow path
            acts = parse_system_trace(payload)
            got = decode_rows(acts.data, _RowNote)
            assert ("not read yet" in repr(acts.data)) == one_pass  # no bytes cut out
            expected = [msgspec.json.decode(d, type=_RowNote) for d in acts.data]
            assert got == expected and len(got) == 5
            assert [r.note for r in got] == ["row 0", "row 1", "row 2", "row 3", "none"]
            assert decode_rows(acts.data, _RowNote) == expected  # from the cut bytes
            assert decode_rows(list(acts.data), _RowNote) == expected  # plain bytes
    with pytest.raises(msgspec.ValidationError):
        decode_rows(parse_system_trace(_payload(events)).data, list[int])
