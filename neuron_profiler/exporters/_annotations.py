"""Event args -> Perfetto DebugAnnotation bytes, appended to TrackEvents by ``perfetto.py``.

    encoder = ArgsEncoder(trace)
    blobs = encoder.encode_many(args_rows)      # one bytes per args object, in order
    interned = encoder.take_interned()          # InternedData to write before those events

Numbers and bools become typed values; strings become interned string values (``string_value_iid``);
lists and dicts are kept as their JSON text, interned the same way, so repeated shapes, types and
call stacks cost a couple of bytes. Arg names are interned (``name_iid``). Field numbers are read
from perfetto's generated protos.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from neuron_profiler.exporters import _protowire as W
from neuron_profiler.trace.model import Trace


def _num(message: Any, name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


class ArgsEncoder:
    """Args -> DebugAnnotation bytes. Arg names and string values are interned (new ones are
    declared per chunk); lists and dicts are kept as their JSON text, interned the same way.
    Encoded (name, value) pairs are cached: most args repeat (shapes, types, call stacks)."""

    CACHE_LIMIT = 1_000_000

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.names: dict[str, int] = {}
        self.strings: dict[bytes, int] = {}
        self.new_names: list[tuple[int, str]] = []
        self.new_strings: list[tuple[int, bytes]] = []
        self.cache: dict[tuple[str, bytes], bytes] = {}
        self.int_heads: dict[tuple[str, int], bytes] = {}
        self.decode = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
        self.decode_many = msgspec.json.Decoder(list[dict[str, msgspec.Raw]]).decode

    def _name_iid(self, key: str) -> int:
        iid = self.names.get(key)
        if iid is None:
            iid = self.names[key] = len(self.names) + 1
            self.new_names.append((iid, key))
        return iid

    def _string_iid(self, text: bytes) -> int:
        iid = self.strings.get(text)
        if iid is None:
            iid = self.strings[text] = len(self.strings) + 1
            self.new_strings.append((iid, text))
        return iid

    def encode_many(self, args_rows: list[int]) -> list[bytes]:
        """Annotations for each args object (``Trace.raw_args[i]``), decoded in one batch."""
        raw_args = self.trace.raw_args
        try:
            decoded = self.decode_many(b"[" + b",".join([raw_args[i] for i in args_rows]) + b"]")
        except (msgspec.DecodeError, RecursionError):  # one bad object: one at a time
            decoded = [self._decode_one(raw_args[i]) for i in args_rows]
        cache, join, miss, heads = self.cache, b"".join, self._encode_item, self.int_heads
        small, n_small, pairs = _SMALL_VARINTS, len(_SMALL_VARINTS), _PAIRS
        out = []
        for args in decoded:
            parts = []
            for key, raw in args.items():
                value = bytes(raw)
                if value.isdigit() and len(value) < 19:  # ids, sizes: mostly unique, not cached
                    number = int(value)
                    if number < n_small:
                        body = small[number]
                    elif number < _PAIR_LIMIT:  # low 14 bits as two bytes, then the rest
                        body = pairs[number & 0x3FFF] + small[number >> 14]
                    else:
                        body = W.encode_varint(number)
                    head = heads.get((key, len(body))) or self._int_head(key, len(body))
                    parts.append(head + body)
                    continue
                encoded = cache.get((key, value))
                parts.append(encoded if encoded is not None else miss((key, value)))
            out.append(parts[0] if len(parts) == 1 else join(parts))
        return out

    def _int_head(self, key: str, size: int) -> bytes:
        """Annotation key and length, name iid and int tag of an int arg: all but its value."""
        prefix = _NAME_IID_TAG + W.encode_varint(self._name_iid(key)) + _INT_TAG
        head = self.int_heads[(key, size)] = (
            _ANNOTATION_TAG + W.encode_varint(len(prefix) + size) + prefix
        )
        return head

    def _decode_one(self, raw: bytes) -> dict[str, msgspec.Raw]:
        try:
            return self.decode(raw)
        except (msgspec.DecodeError, RecursionError):  # (the loader keeps neither)
            return {}

    def _encode_item(self, item: tuple[str, bytes]) -> bytes:
        if len(self.cache) >= self.CACHE_LIMIT:
            self.cache.clear()
        inner = _NAME_IID_TAG + W.encode_varint(self._name_iid(item[0])) + self._value(item[1])
        encoded = self.cache[item] = _ANNOTATION_TAG + W.encode_varint(len(inner)) + inner
        return encoded

    def _value(self, raw: bytes) -> bytes:
        if raw[:1] in b"[{":
            return _STRING_IID_TAG + W.encode_varint(self._string_iid(raw))
        try:
            value = msgspec.json.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):  # 1e400: kept as its text
            return _STRING_IID_TAG + W.encode_varint(self._string_iid(raw))
        if isinstance(value, str):
            return _STRING_IID_TAG + W.encode_varint(self._string_iid(value.encode()))
        return _scalar(value)

    def take_interned(self) -> pb.InternedData | None:
        """Arg names and string values interned since the last call (to declare before use)."""
        if not (self.new_names or self.new_strings):
            return None
        data = pb.InternedData()
        for iid, name in self.new_names:
            data.debug_annotation_names.add(iid=iid, name=name)
        for iid, text in self.new_strings:
            data.debug_annotation_string_values.add(iid=iid, str=text)
        self.new_names, self.new_strings = [], []
        return data


_ANNOTATION_TAG = W.tag(_num(pb.TrackEvent, "debug_annotations"), W.WIRE_LEN)
_NAME_IID_TAG = W.tag(_num(pb.DebugAnnotation, "name_iid"), W.WIRE_VARINT)
_STRING_IID_TAG = W.tag(_num(pb.DebugAnnotation, "string_value_iid"), W.WIRE_VARINT)


_BOOL_TAG = W.tag(_num(pb.DebugAnnotation, "bool_value"), W.WIRE_VARINT)
_INT_TAG = W.tag(_num(pb.DebugAnnotation, "int_value"), W.WIRE_VARINT)
_UINT_TAG = W.tag(_num(pb.DebugAnnotation, "uint_value"), W.WIRE_VARINT)
_DOUBLE_TAG = W.tag(_num(pb.DebugAnnotation, "double_value"), W.WIRE_FIXED64)
_STRING_TAG = W.tag(_num(pb.DebugAnnotation, "string_value"), W.WIRE_LEN)
_pack_double = struct.Struct("<d").pack
_SMALL_VARINTS = [W.encode_varint(i) for i in range(1 << 15)]
# the first two bytes of any varint >= 2**14: 14 low bits with their continuation bits
_PAIRS = [bytes(((i & 0x7F) | 0x80, (i >> 7) | 0x80)) for i in range(1 << 14)]
_PAIR_LIMIT = len(_SMALL_VARINTS) << 14


def _scalar(value: Any) -> bytes:
    """A JSON number, bool or null as DebugAnnotation value fields."""
    if value is True or value is False:
        return _BOOL_TAG + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return _INT_TAG + W.encode_varint(value)
        if value < 2**64:
            return _UINT_TAG + W.encode_varint(value)
        text = str(value).encode()
    elif isinstance(value, float):
        return _DOUBLE_TAG + _pack_double(value)
    else:
        text = msgspec.json.encode(value)  # null
    return _STRING_TAG + W.encode_varint(len(text)) + text
