"""``exporters.writers``: one registry of trace writers, chosen by the output's suffix."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from perfetto_checks import decode_and_check

from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.exporters import WRITERS, write_trace, writer_for
from neuron_profiler.exporters.writers import SUFFIXES
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace, TraceBuilder


def _trace(n: int = 5) -> Trace:
    b = TraceBuilder("in.json")
    for i in range(n):
        b.add(
            name=f"op{i}",
            ts_ns=10**18 + i * 1000,
            dur_ns=500,
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=1,
            tid=2,
            args={"External id": i + 1},
        )
    return b.build()


def test_every_suffix_has_one_writer() -> None:
    assert SUFFIXES == (".json", ".json.gz", ".pftrace")
    assert len(set(SUFFIXES)) == len(SUFFIXES)
    for writer in WRITERS:
        for suffix in writer.suffixes:
            assert writer_for(f"dir/x.pt.trace{suffix}") is writer
    assert [w.binary for w in WRITERS] == [False, True, True]


@pytest.mark.parametrize("name", ["out.txt", "out.gz", "out", "out.json.bz2"])
def test_unknown_suffix_is_one_error_naming_the_file(name: str, tmp_path: Path) -> None:
    with pytest.raises(NeuronProfilerError) as err:
        write_trace(_trace(), tmp_path / name)
    message = str(err.value)
    assert err.value.exit_code == 2 and name in message and "\n" not in message
    assert all(s in message for s in SUFFIXES)
    assert not (tmp_path / name).exists()


def test_each_writer_writes_its_format(tmp_path: Path) -> None:
    trace = _trace()
    plain = write_trace(trace, tmp_path / "t.json")
    assert plain.path == tmp_path / "t.json" and plain.summary == f"wrote 5 events to {plain.path}"
    assert len(json.loads(plain.path.read_bytes())["traceEvents"]) == 5
    packed = write_trace(trace, tmp_path / "t.json.gz")
    assert len(json.loads(gzip.decompress(packed.path.read_bytes()))["traceEvents"]) == 5
    assert len(load_trace(packed.path)) == 5
    proto = write_trace(trace, tmp_path / "t.pftrace", args=False)
    assert proto.result.slices == 5 and "wrote 5 slices" in proto.summary
    assert len(decode_and_check(proto.path).slices) == 5
    done: list[int] = []
    write_trace(trace, tmp_path / "p.json", progress=done.append)
    assert done and done[-1] == 5
