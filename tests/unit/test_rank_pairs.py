"""Rank directories paired by distributedInfo rank (``analysis.rank_pairs``), else in name
order with the reason: hand-made ranks, and files whose rank is in their header."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_profiler.analysis.rank_pairs import BY_NAME, BY_RANK, header_rank, pair_ranks

A = [Path("a/r0.json"), Path("a/r1.json"), Path("a/r2.json")]
B = [Path("b/x.json"), Path("b/y.json"), Path("b/z.json")]


def ranks(table: dict[str, int | None]):  # noqa: ANN201
    return lambda path: table[str(path)]


def test_pairs_by_rank_whatever_the_names() -> None:
    rank_of = ranks(
        {
            "a/r0.json": 2,
            "a/r1.json": 0,
            "a/r2.json": 1,
            "b/x.json": 0,
            "b/y.json": 1,
            "b/z.json": 2,
        }
    )
    p = pair_ranks(A, B, rank_of)
    assert p.by == BY_RANK and p.note == ""
    assert p.ranks == (0, 1, 2)
    assert p.pairs == ((A[1], B[0]), (A[2], B[1]), (A[0], B[2]))


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"a/r1.json": None}, "A's r1.json has no distributedInfo rank"),
        ({"b/y.json": 0}, "B's x.json and y.json both have rank 0"),
        ({"b/z.json": 5}, "ranks differ (A: 0, 1, 2; B: 0, 1, 5)"),
    ],
)
def test_name_order_when_ranks_do_not_pair_and_why(table: dict, says: str) -> None:
    base = {"a/r0.json": 0, "a/r1.json": 1, "a/r2.json": 2, "b/x.json": 0, "b/y.json": 1}
    p = pair_ranks(A, B, ranks({**base, "b/z.json": 2, **table}))
    assert p.by == BY_NAME and p.note == says
    assert p.pairs == tuple(zip(A, B, strict=True)) and p.ranks == (None, None, None)


def test_header_rank_reads_distributed_info_before_the_events(tmp_path: Path) -> None:
    ranked = tmp_path / "ranked.json"
    ranked.write_text(
        '{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 7, "world_size": 8},'
        ' "traceEvents": [{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'
    )
    plain = tmp_path / "plain.json"
    plain.write_text('{"traceEvents": []}')
    assert header_rank(ranked) == 7
    assert header_rank(plain) is None
    assert header_rank(tmp_path / "missing.json") is None  # its load will say why
