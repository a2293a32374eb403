"""``runtime_trace.extension``: the one decoder of ``data["neuron_profiler"]``, keyed by the
format's constants, with its loose twin and the parser's projection derived from it."""

from __future__ import annotations

import msgspec
import pytest

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace import parser, placement
from neuron_profiler.runtime_trace.extension import Extension, LooseExtension, projection


def _keys(struct: type) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(struct)]


def test_every_key_is_a_format_constant() -> None:
    constants = {v for k, v in vars(F).items() if k.startswith("X_") and isinstance(v, str)}
    assert set(_keys(Extension)) <= constants
    assert _keys(LooseExtension) == _keys(Extension)


def test_readers_use_the_one_declaration() -> None:
    assert placement._Ext is Extension and placement._LooseExt is LooseExtension
    fields = {f.encode_name: f for f in msgspec.structs.fields(Extension)}
    for f in msgspec.structs.fields(parser._Ext):  # same name, type and default
        assert (f.name, f.type, f.default) == (
            fields[f.encode_name].name,
            fields[f.encode_name].type,
            fields[f.encode_name].default,
        )


def test_typed_loose_and_projected_decoding() -> None:
    raw = msgspec.json.encode(
        {
            F.X_OP: "aten::mm",
            F.X_FLOPS: 12,
            F.X_CORRELATION_ID: 7,
            F.X_RANKS: [0, 1],
            "unknown": {"k": 1},
        }
    )
    ext = msgspec.json.decode(raw, type=Extension)
    assert (ext.op, ext.flops, ext.bytes, ext.correlation_id, ext.ranks) == (
        "aten::mm",
        12,
        -1,
        7,
        [0, 1],
    )
    odd = raw.replace(b"12", b"1.5")
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(odd, type=Extension)
    assert msgspec.json.decode(odd, type=LooseExtension).flops == 1.5
    Row = projection(Extension, (F.X_OP, F.X_CORRELATION_ID), "Row")
    row = msgspec.json.decode(odd, type=Row)  # the other keys' values never reject a row
    assert (row.op, row.correlation_id) == ("aten::mm", 7)
    with pytest.raises(ValueError, match="no key"):
        projection(Extension, ("no such key",), "Bad")
