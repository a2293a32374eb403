"""Decode a .pftrace with perfetto's own generated protos and check a track-event stream's
invariants independently of the writer (shared by the unit and integration tests).

    decoded = decode_and_check(path)     # raises AssertionError naming the broken invariant
    decoded.slices                       # [(track_uuid, name, category, start_ns, end_ns)]
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


@dataclass
class Decoded:
    tracks: dict[int, object] = field(default_factory=dict)  # uuid -> TrackDescriptor
    slices: list[tuple[int, str, str, int, int]] = field(default_factory=list)
    instants: list[tuple[int, str, str, int]] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    args: dict[tuple[int, str, int], dict[str, object]] = field(default_factory=dict)
    flows: dict[int, list[tuple[int, str, bool]]] = field(default_factory=lambda: defaultdict(list))
    slice_flows: dict[tuple[int, str, int], list[int]] = field(default_factory=dict)

    def track_named(self, name: str) -> object:
        hits = [t for t in self.tracks.values() if _track_name(t) == name]
        assert len(hits) == 1, f"{len(hits)} tracks named {name!r}"
        return hits[0]


def _track_name(desc: object) -> str:
    if desc.HasField("thread"):
        return desc.thread.thread_name
    if desc.HasField("process"):
        return desc.process.process_name
    return desc.name


def _annotation_value(ann: object, strings: dict[int, bytes]) -> object:
    which = ann.WhichOneof("value")
    if which == "string_value_iid":
        return strings[ann.string_value_iid].decode()
    return getattr(ann, which) if which else None


def decode_and_check(path: Path) -> Decoded:
    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    out = Decoded()
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    arg_strings: dict[int, bytes] = {}
    seq_ids = set()
    cleared = False
    events = []
    for index, packet in enumerate(trace.packet):
        seq_ids.add(packet.trusted_packet_sequence_id)
        if index == 0:
            assert packet.sequence_flags & CLEARED, "first packet must clear incremental state"
        if packet.sequence_flags & CLEARED:
            cleared = True
        if packet.HasField("interned_data") or packet.HasField("track_event"):
            assert packet.sequence_flags & NEEDS, f"packet {index} uses interning without NEEDS"
            assert cleared, f"packet {index} uses interned state before it was cleared"
        data = packet.interned_data
        for table, entries in (
            (names, data.event_names),
            (cats, data.event_categories),
            (arg_names, data.debug_annotation_names),
        ):
            for entry in entries:
                assert entry.iid > 0, "iid 0 is invalid"
                table[entry.iid] = entry.name
        for entry in data.debug_annotation_string_values:
            arg_strings[entry.iid] = entry.str
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            assert desc.uuid not in out.tracks, f"track uuid {desc.uuid} declared twice"
            if desc.parent_uuid:
                assert desc.parent_uuid in out.tracks, f"parent of {desc.uuid} not declared yet"
            out.tracks[desc.uuid] = desc
        if packet.HasField("track_event"):
            ev = packet.track_event
            assert ev.track_uuid in out.tracks, f"event on undeclared track {ev.track_uuid}"
            name = names[ev.name_iid] if ev.name_iid else ""
            assert not ev.name_iid or ev.name_iid in names, "name iid used before declared"
            cat = ",".join(cats[c] for c in ev.category_iids)
            args = {
                arg_names[a.name_iid]: _annotation_value(a, arg_strings)
                for a in ev.debug_annotations
            }
            events.append((packet.timestamp, index, ev, name, cat, args))
    assert len(seq_ids) == 1 and 0 not in seq_ids, f"sequence ids {seq_ids}"
    _check_events(out, sorted(events, key=lambda e: (e[0], e[1])))
    return out


def _check_events(out: Decoded, events: list) -> None:
    """Per track: every begin has an end, ends close the innermost open slice."""
    stacks: dict[int, list] = defaultdict(list)
    for ts, _, ev, name, cat, args in events:
        track = ev.track_uuid
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            stacks[track].append(
                (name, cat, ts, list(ev.flow_ids), list(ev.terminating_flow_ids), args)
            )
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            assert stacks[track], f"end without begin on track {track} at {ts}"
            b_name, b_cat, start, flow_ids, term_ids, args = stacks[track].pop()
            out.slices.append((track, b_name, b_cat, start, ts))
            _record(out, (track, b_name, start), start, flow_ids, term_ids, args)
        elif ev.type == TrackEvent.TYPE_INSTANT:
            out.instants.append((track, name, cat, ts))
            _record(
                out, (track, name, ts), ts, list(ev.flow_ids), list(ev.terminating_flow_ids), args
            )
        elif ev.type == TrackEvent.TYPE_COUNTER:
            assert out.tracks[track].HasField("counter"), "counter value on a non-counter track"
            out.counters[track].append((ts, ev.double_counter_value))
    open_left = {t: len(s) for t, s in stacks.items() if s}
    assert not open_left, f"slices never ended: {open_left}"
    for flow_id, ends in out.flows.items():
        assert len(ends) >= 2, f"flow {flow_id} has one endpoint"
        terminating = [e for e in ends if e[2]]
        assert len(terminating) == 1, f"flow {flow_id} terminates {len(terminating)} times"
        assert max(e[0] for e in ends) == terminating[0][0], f"flow {flow_id} ends early"


def _record(out: Decoded, key: tuple, ts: int, flow_ids: list, term_ids: list, args: dict) -> None:
    if args:
        out.args[key] = args
    if flow_ids or term_ids:
        out.slice_flows[key] = flow_ids + term_ids
    for fid in flow_ids:
        out.flows[fid].append((ts, key[1], False))
    for fid in term_ids:
        out.flows[fid].append((ts, key[1], True))
