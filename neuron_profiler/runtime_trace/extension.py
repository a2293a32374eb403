"""The decoder of our extension object ``data["neuron_profiler"]`` (docs/runtime-events.md),
declared once, every key taken from ``format.py``'s constants::

    ext = msgspec.json.decode(raw, type=Extension)          # typed: numbers come out as ints
    loose = msgspec.json.decode(raw, type=LooseExtension)   # the same keys, any value
    Row = projection(Extension, (F.X_OP, F.X_CORRELATION_ID), "Row")   # only the keys read

``Extension`` says what a reader may rely on: an id or count is an int (absent: the default),
names are strings. ``LooseExtension`` (derived) takes the same keys with any value, for payloads
whose values are odd (floats, nulls, lists), so that a reader can keep the event and count the
odd value. ``projection`` derives a decoder of some of the keys, same names, types and defaults:
msgspec decodes every field a struct declares, so a reader on a hot path (the parser reads five
keys of every event) declares only what it reads, and values of the other keys never make it
reject an event. Attribute names are the keys' Python spellings; the JSON names come from the
constants, so a key renamed in ``format.py`` is renamed here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec

from neuron_profiler.runtime_trace import format as F

ABSENT = -(2**63)  # an absent optional int (JSON null decodes to None and takes a slower path)
I64 = Annotated[int, msgspec.Meta(ge=ABSENT + 1, le=2**63 - 1)]


class Extension(msgspec.Struct, gc=False, frozen=True):
    """Every key of ``data[EXT_KEY]`` a reader uses (format.py describes each)."""

    op: str | None = msgspec.field(default=None, name=F.X_OP)
    collective: str | None = msgspec.field(default=None, name=F.X_COLLECTIVE_OP)
    correlation_id: I64 | None = msgspec.field(default=0, name=F.X_CORRELATION_ID)
    modelled: bool = msgspec.field(default=False, name=F.X_MODELLED)
    exec_id: I64 | None = msgspec.field(default=ABSENT, name=F.X_EXEC_ID)
    engine: str | None = msgspec.field(default=None, name=F.X_ENGINE)
    dtype: str | None = msgspec.field(default=None, name=F.X_DTYPE)
    flops: int = msgspec.field(default=-1, name=F.X_FLOPS)
    bytes: int = msgspec.field(default=-1, name=F.X_BYTES)
    direction: str | None = msgspec.field(default=None, name=F.X_DIRECTION)
    launch_ns: int = msgspec.field(default=-1, name=F.X_LAUNCH_NS)
    ranks: Any = msgspec.field(default=None, name=F.X_RANKS)
    algorithm: Any = msgspec.field(default=None, name=F.X_ALGORITHM)
    reason: Any = msgspec.field(default=None, name=F.X_REASON)
    shapes: Any = msgspec.field(default=None, name=F.X_SHAPES)
    dtypes: Any = msgspec.field(default=None, name=F.X_DTYPES)
    sync: Any = msgspec.field(default=None, name=F.X_SYNC_REASON)
    overhead: str | None = msgspec.field(default=None, name=F.X_OVERHEAD)
    before_ns: Any = msgspec.field(default=0, name=F.X_BEFORE_NS)
    after_ns: Any = msgspec.field(default=0, name=F.X_AFTER_NS)
    pct_of_peak: float | None = msgspec.field(default=None, name=F.X_PCT_PEAK)
    collective_wait: bool = msgspec.field(default=False, name=F.X_COLLECTIVE_WAIT)
    graph_id: Any = msgspec.field(default=None, name=F.X_GRAPH_ID)
    graph_ops: Any = msgspec.field(default=None, name=F.X_GRAPH_OPS)


def _derived(name: str, fields: Iterable[msgspec.structs.FieldInfo], loose: bool) -> Any:
    fields = list(fields)
    return msgspec.defstruct(
        name,
        [(f.name, Any, None) if loose else (f.name, f.type, f.default) for f in fields],
        rename={f.name: f.encode_name for f in fields},
        gc=False,
        frozen=True,
    )


def projection(struct: Any, keys: Iterable[str], name: str) -> Any:
    """A decoder of ``struct``'s fields whose JSON names are ``keys`` (same attribute names,
    types and defaults)."""
    wanted = set(keys)
    fields = [f for f in msgspec.structs.fields(struct) if f.encode_name in wanted]
    missing = wanted - {f.encode_name for f in fields}
    if missing:
        raise ValueError(f"{struct.__name__} has no key {sorted(missing)}")
    return _derived(name, fields, loose=False)


# The same keys with any value (None when absent).
LooseExtension = _derived("LooseExtension", msgspec.structs.fields(Extension), loose=True)

__all__ = ["ABSENT", "I64", "Extension", "LooseExtension", "projection"]
