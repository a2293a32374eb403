"""The Perfetto writer's vectorised parts against independent references: the nesting order
checked by a stack walk, flow binding by a plain-Python reference, the byte scatter against
plain bytes concatenation, padded varints decoded by protobuf, and the packet stream that must
not depend on how it is cut into chunks."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PbTrace
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
from perfetto_checks import decode_and_check

from neuron_profiler.analysis.counters import device_counters
from neuron_profiler.exporters import _protowire as W
from neuron_profiler.exporters._flows import STEP_BACK, bind_flows, thread_lookup
from neuron_profiler.exporters._nesting import assign_lanes
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import EventKind, Phase, TraceBuilder
from neuron_profiler.trace import schema as S

T0 = 1_700_000_000_000_000_000


def _stack_check(group: np.ndarray, start: np.ndarray, end: np.ndarray, nest) -> None:
    """Every (group, lane) sees its begins and ends well nested, in time order."""
    n = len(start)
    assert sorted(nest.slice[nest.is_begin].tolist()) == list(range(n))
    assert sorted(nest.slice[~nest.is_begin].tolist()) == list(range(n))
    assert (np.diff(nest.ts) >= 0).all()
    expected_ts = np.where(nest.is_begin, start[nest.slice], end[nest.slice])
    assert (nest.ts == expected_ts).all()
    assert (nest.slice[nest.begin_at] == np.arange(n)).all() and nest.is_begin[nest.begin_at].all()
    stacks: dict[tuple[int, int], list[int]] = defaultdict(list)
    for s, begin in zip(nest.slice.tolist(), nest.is_begin.tolist(), strict=True):
        stack = stacks[(int(group[s]), int(nest.lane[s]))]
        if begin:
            stack.append(s)
        else:
            assert stack and stack.pop() == s, f"slice {s} does not end innermost"


def _laminar(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Well-nested intervals inside [lo, hi): children split their parent, touching allowed."""
    out: list[tuple[int, int]] = []
    todo = [(lo, hi)]
    while todo and len(out) < n:
        a, b = todo.pop()
        if b - a < 2:
            continue
        s = int(rng.integers(a, b - 1))
        e = int(rng.integers(s + 1, b + 1))
        out.append((s, e))
        todo += [(s, e), (e, b)] if rng.random() < 0.7 else [(a, s), (s, e)]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_emission_order_nests_on_every_lane(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    group = rng.integers(0, int(rng.integers(1, 7)), n)
    start = rng.integers(0, int(rng.integers(2, 3_000)), n)  # many equal starts
    if seed % 2:
        start = np.sort(start)  # the fast path (a trace is sorted by time)
    if seed % 5 == 0:
        start = start + T0
    if seed % 7 == 0:  # a span too wide to pack: the dense-rank path
        start = np.where(rng.random(n) < 0.5, start, start + 2**61)
    end = start + rng.integers(1, int(rng.integers(2, 800)), n)
    _stack_check(group, start, end, assign_lanes(group, start, end))


@pytest.mark.parametrize("seed", range(10))
def test_well_nested_work_stays_on_its_track(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    rows = []
    for g in range(4):
        rows += [(g, s, e) for s, e in _laminar(rng, 300, 0, 10_000)]
    order = (
        rng.permutation(len(rows)) if seed % 2 else np.argsort([r[1] for r in rows], kind="stable")
    )
    group, start, end = (np.array([rows[i][k] for i in order], dtype=np.int64) for k in range(3))
    nest = assign_lanes(group, start, end)
    assert (nest.lane == 0).all()
    _stack_check(group, start, end, nest)


def test_crossing_slices_move_and_nothing_else() -> None:
    # a [0, 10) and b [5, 15) cross: b, the later one, moves; c nests in a and stays
    group = np.zeros(3, dtype=np.int64)
    start, end = np.array([0, 5, 2]), np.array([10, 15, 4])
    nest = assign_lanes(group, start, end)
    assert nest.lane.tolist() == [0, 1, 0]
    _stack_check(group, start, end, nest)


def test_scatter_rows_and_blobs_against_bytes() -> None:
    rng = np.random.default_rng(1)
    n = 300
    widths = rng.integers(1, 6, n)  # row i: a prefix of widths[i] bytes, then a blob
    blobs = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 4, n)]
    prefixes = [bytes(rng.integers(0, 256, int(w), dtype=np.uint8)) for w in widths]
    expected = b"".join(p + b for p, b in zip(prefixes, blobs, strict=True))
    sizes = widths + np.array([len(b) for b in blobs])
    offsets = np.cumsum(sizes) - sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    for w in np.unique(widths).tolist():
        rows = np.flatnonzero(widths == w)
        matrix = np.array([list(prefixes[i]) for i in rows], dtype=np.uint8).reshape(-1, w)
        W.scatter_rows(out, offsets[rows], matrix)
    blob_sizes = np.array([len(b) for b in blobs])
    W.scatter_blobs(
        out, offsets + widths, np.frombuffer(b"".join(blobs), dtype=np.uint8), blob_sizes
    )
    assert out.tobytes() == expected


@pytest.mark.parametrize("width", range(1, 11))
def test_padded_varints_of_every_width(width: int) -> None:
    """Values of each varint width, spans narrow (shared high bytes) and wide: every row of the
    layout decodes to its own value with protobuf."""
    rng = np.random.default_rng(width)
    top = (1 << min(7 * width, 64)) - 1
    low = 1 << (7 * (width - 1)) if width > 1 else 0
    for span in (1, 2**7, 2**20, top - low):
        base = int(rng.integers(low, max(low + 1, top - span), dtype=np.uint64))
        values = np.array(
            [base, base + span, base + span // 2, top if span == top - low else base + 1],
            dtype=np.uint64,
        )
        rows = W.FixedRows(len(values))
        rows.varint(11, values)  # TrackEvent.track_uuid
        decoded = [TrackEvent.FromString(r.tobytes()).track_uuid for r in rows.matrix()]
        assert decoded == values.tolist()


def _padded(value: int, width: int) -> bytes:
    """Reference: ``value`` (an int64 as its 64-bit two's complement) as a ``width``-byte varint,
    the bytes before the last carrying the continuation bit; plain Python, one group at a time."""
    value %= 2**64
    groups = [(value >> (7 * i)) & 0x7F for i in range(width)]
    assert value >> (7 * width) == 0, "width too small for the value"
    return bytes(g | (0x80 if i < width - 1 else 0) for i, g in enumerate(groups))


def _size(value: int) -> int:
    value %= 2**64
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


EDGES = [0, 1, 127, 128, 255, 16383, 16384, 2**28 - 1, 2**28, 2**31, 2**56 - 1, 2**56, 2**63 - 1]


@pytest.mark.parametrize("seed", range(8))
def test_varint_columns_against_a_python_encoder(seed: int) -> None:
    """Every row of a varint column is the tag, then its value padded to the column's widest
    size: the exact bytes, against a plain-Python encoder (edge values, negative int64 as 10
    bytes, nearby timestamps whose high bytes every row shares, one-row columns)."""
    rng = np.random.default_rng(seed)
    base = 1_764_000_000_000_000_000 + int(rng.integers(0, 2**40))
    columns = [
        np.array(EDGES, dtype=np.int64),
        np.array([-1, -(2**63), 0, 5, -300], dtype=np.int64),
        np.array([2**64 - 1, 0, 2**63], dtype=np.uint64),
        base + np.sort(rng.integers(0, 2 ** int(rng.integers(1, 40)), 50)),  # shared high groups
        rng.integers(0, 2 ** int(rng.integers(1, 63)), 40),
        np.array([int(rng.choice(EDGES))], dtype=np.int64),
        rng.integers(0, 128, 30),
    ]
    for values in columns:
        rows = W.FixedRows(len(values))
        rows.varint(11, values)
        width = max(_size(int(v)) for v in values.tolist())
        tag = bytes([11 << 3])
        expected = [tag + _padded(int(v), width) for v in values.tolist()]
        assert [r.tobytes() for r in rows.matrix()] == expected


def test_words_and_constants_against_int_to_bytes() -> None:
    """Raw per-row words of every width between constant bytes: each row is the constants and
    each word's low bytes, little-endian (uint64 and uint32 words, values above the width)."""
    rng = np.random.default_rng(3)
    n = 64
    words = [(rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64), w) for w in range(1, 9)]
    words.append((rng.integers(0, 2**32, n, dtype=np.int64).astype(np.uint32), 3))
    rows = W.FixedRows(n)
    expected = [b""] * n
    for k, (values, width) in enumerate(words):
        rows.raw(bytes([k, 0xFF]))
        rows.words(values, width)
        for i, v in enumerate(values.tolist()):
            expected[i] += bytes([k, 0xFF]) + (v % 2 ** (8 * width)).to_bytes(width, "little")
    assert [r.tobytes() for r in rows.matrix()] == expected
    same = W.FixedRows(3)  # the same word on every row: kept as constant bytes, same output
    same.words(np.full(3, 0x1234, dtype=np.uint64), 2)
    assert [r.tobytes() for r in same.matrix()] == [b"\x34\x12"] * 3


def test_sorted_search_matches_numpy() -> None:
    """The merge search gives np.searchsorted(side="right") for sorted needles (duplicates, ties
    with the haystack, out of range) and falls back to it for unsorted ones."""
    from neuron_profiler.exporters._flows import _search_sorted

    rng = np.random.default_rng(4)
    for n, k in ((0, 5), (5, 0), (1, 1), (300, 200), (1000, 3000)):
        hay = np.sort(rng.integers(-20, 400, n))
        needles = np.sort(np.concatenate([rng.integers(-50, 450, k), hay[: k // 3]]))
        assert (
            _search_sorted(hay, needles).tolist()
            == np.searchsorted(hay, needles, side="right").tolist()
        )
        shuffled = rng.permutation(needles)
        assert (
            _search_sorted(hay, shuffled).tolist()
            == np.searchsorted(hay, shuffled, side="right").tolist()
        )


def test_flow_offsets_against_a_loop() -> None:
    """Each flow id's byte offset: its packet's flow ids end where the packet's args begin, in
    the order given."""
    from neuron_profiler.exporters.perfetto import _FLOW_WIDTH, _flow_offsets

    rng = np.random.default_rng(6)
    m = 200
    n_flows = rng.integers(0, 4, m) * (rng.random(m) < 0.4)
    packet = np.repeat(np.arange(m), n_flows)
    args_at = np.cumsum(rng.integers(30, 90, m))
    expected = [
        int(args_at[p]) - _FLOW_WIDTH * (int(n_flows[p]) - r)
        for p in range(m)
        for r in range(int(n_flows[p]))
    ]
    assert _flow_offsets(packet, args_at, n_flows).tolist() == expected


def test_thread_lookup_against_a_dict() -> None:
    rng = np.random.default_rng(2)
    pairs = sorted({(int(p), int(t)) for p, t in rng.integers(-3, 5, (20, 2))})
    pid, tid = rng.integers(-4, 6, 500), rng.integers(-4, 6, 500)
    index = {pair: i for i, pair in enumerate(pairs)}
    expected = [index.get((int(p), int(t)), -1) for p, t in zip(pid, tid, strict=True)]
    assert thread_lookup(pid, tid, pairs).tolist() == expected
    assert thread_lookup(pid + 2**40, tid, pairs).tolist() == [-1] * 500  # the wide-key path


def _nested_trace(seed: int):
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    slices = []
    for tid in (1, 2, 3):
        for s, e in _laminar(rng, 200, 0, 50_000):
            b.add(
                name="op",
                ts_ns=T0 + s,
                dur_ns=e - s,
                kind=EventKind.CPU_OP,
                cat="cpu_op",
                pid=7,
                tid=tid,
            )
            slices.append((tid, s, e))
    for i in range(300):  # flows at slice starts (always bound) and at random times, some on
        tid, ts = int(rng.integers(1, 5)), int(rng.integers(0, 50_000))  # a thread with none
        if i % 4 < 2:
            tid, ts, _ = slices[int(rng.integers(0, len(slices)))]
        ph = Phase.FLOW_START if i % 2 == 0 else Phase.FLOW_END
        b.add(
            name="ac2g",
            ts_ns=T0 + ts,
            ph=ph,
            kind=EventKind.FLOW,
            cat="ac2g",
            pid=7,
            tid=tid,
            flow_id=i // 2,
        )
    return b.build()


def _reference_flows(trace, flow_rows, cand, step_back: int):
    """The documented binding in plain Python: per flow event, the latest-starting candidate
    on its thread (ties: the shorter) that has begun, stepping back over at most ``step_back``
    candidates to one that still encloses it; per flow (category, id), its bound events by
    time, repeats on one slice dropped, kept when two remain, the last one terminating."""
    ts, dur, tid, pid = (trace.col(c) for c in (S.TS_NS, S.DUR_NS, S.TID, S.PID))
    per_thread = defaultdict(list)  # (pid, tid) -> [(start, -end, index)] sorted
    for i, r in enumerate(cand.tolist()):
        per_thread[(int(pid[r]), int(tid[r]))].append((int(ts[r]), -int(ts[r] + dur[r]), i))
    for v in per_thread.values():
        v.sort()
    uid_of: dict[tuple[int, int], int] = {}
    events = defaultdict(list)
    for r in flow_rows.tolist():
        key = (int(trace.col(S.CAT_ID)[r]), int(trace.col(S.FLOW_ID)[r]))
        uid = uid_of.setdefault(key, len(uid_of))
        t = int(ts[r])
        starts = per_thread.get((int(pid[r]), int(tid[r])), [])
        later = [k for k, (s, _, _) in enumerate(starts) if s <= t]
        bound = None
        for k in reversed(later[-step_back:]):
            if -starts[k][1] >= t:
                bound = starts[k][2]
                break
        if bound is not None:
            events[uid].append((t * 8 + int(trace.col(S.PH)[r]), bound))
    out = []
    for uid in sorted(events):
        chain = [c for _, c in sorted(events[uid], key=lambda e: e[0])]
        chain = [c for k, c in enumerate(chain) if k == 0 or c != chain[k - 1]]
        if len(chain) >= 2:
            out += [(c, uid + 1, k == len(chain) - 1) for k, c in enumerate(chain)]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_flow_binding_against_a_reference(seed: int) -> None:
    trace = _nested_trace(seed)
    ph, tid = trace.col(S.PH), trace.col(S.TID)
    cand = np.flatnonzero(ph == Phase.COMPLETE)
    flow_rows = np.flatnonzero(np.isin(ph, [Phase.FLOW_START, Phase.FLOW_END]))
    pairs = sorted({(7, int(t)) for t in tid[cand]})
    c_thread = np.array([pairs.index((7, int(t))) for t in tid[cand]])
    flows = bind_flows(trace, flow_rows, cand, c_thread, pairs)
    ours = list(
        zip(
            flows.candidate.tolist(),
            flows.flow_uid.tolist(),
            flows.terminating.tolist(),
            strict=True,
        )
    )
    expected = _reference_flows(trace, flow_rows, cand, STEP_BACK)
    assert ours == expected
    assert flows.flows == sum(1 for _, _, last in expected if last) > 0


def _mixed_trace():
    """Slices (nested and crossing), instants, Chrome counters, device work (counter tracks),
    flows and args: every packet source, interleaved in time."""
    rng = np.random.default_rng(9)
    b = TraceBuilder()
    b.process_names.update({1: "python", 0: "NeuronCore 0"})
    for i in range(400):
        t = int(rng.integers(0, 400_000))
        b.add(
            name=f"op{i % 9}",
            ts_ns=T0 + t,
            dur_ns=int(rng.integers(0, 3_000)),
            kind=EventKind.CPU_OP,
            cat="cpu_op",
            pid=1,
            tid=int(rng.integers(1, 3)),
            args={"i": i, "shape": f"[{i % 4}, 8]"} if i % 3 else None,
        )
        b.add(
            name="k",
            ts_ns=T0 + t + 500,
            dur_ns=int(rng.integers(1, 5_000)),
            kind=EventKind.KERNEL if i % 4 else EventKind.MEMCPY,
            cat="kernel",
            pid=0,
            tid=i % 2,
            args={"bytes": 4096 * (i + 1)} if i % 4 == 0 else None,
        )
        b.add(
            name="ac2g",
            ts_ns=T0 + t + 1,
            ph=Phase.FLOW_START,
            kind=EventKind.FLOW,
            cat="ac2g",
            pid=1,
            tid=1,
            flow_id=i,
        )
        b.add(
            name="ac2g",
            ts_ns=T0 + t + 501,
            ph=Phase.FLOW_END,
            kind=EventKind.FLOW,
            cat="ac2g",
            pid=0,
            tid=i % 2,
            flow_id=i,
        )
        if i % 10 == 0:
            b.add(
                name="mem",
                ts_ns=T0 + t,
                ph=Phase.COUNTER,
                pid=1,
                tid=1,
                args={"allocated": float(i)},
            )
            b.add(
                name="mark",
                ts_ns=T0 + t,
                ph=Phase.INSTANT,
                kind=EventKind.CPU_INSTANT,
                cat="cpu_instant_event",
                pid=1,
                tid=1,
            )
    return b.build()


def _track_events(path: Path) -> list:
    return [p for p in PbTrace.FromString(path.read_bytes()).packet if p.HasField("track_event")]


def test_packets_do_not_depend_on_chunking(tmp_path: Path) -> None:
    trace = _mixed_trace()
    counters = device_counters(trace, bin_ns=5_000)
    streams = []
    for chunk in (1, 7, 500, 1 << 20):
        path = tmp_path / f"{chunk}.pftrace"
        write_perfetto_trace(trace, path, counters=counters, chunk_packets=chunk)
        decoded = decode_and_check(path)
        assert decoded.counters and decoded.instants and decoded.flows and decoded.args
        streams.append(_track_events(path))
    assert all(s == streams[0] for s in streams[1:])
