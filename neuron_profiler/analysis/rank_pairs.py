"""Which trace of run A is compared with which of run B when both are directories of rank
traces (``neuron-prof diff runs/a runs/b``, the TensorBoard Diff view)::

    p = pair_ranks(files_a, files_b)     # by distributedInfo rank, else in name order
    p.by, p.note                          # "rank" | "name order", and why name order
    for (fa, fb), rank in zip(p.pairs, p.ranks): ...

Ranks come from each file's ``distributedInfo`` (Kineto writes it before the events; read
from the file's first blocks, ``trace.loader.read_header``, without loading the trace). The
files are paired by rank when every file of both sides has one, no rank appears twice on a
side, and both sides hold the same ranks; otherwise in name order, and ``note`` says why (so a
reader knows the pairing may not be rank to rank). A file that cannot be read gives no rank:
its load error comes when it is diffed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from neuron_profiler.analysis.rank_summary import distributed_info_of

BY_RANK, BY_NAME, BY_FILES = "rank", "name order", "files"


@dataclass(frozen=True)
class RankPairs:
    """``pairs``: (A file, B file); ``by``: "rank", "name order" or "files" (two files, not
    directories); ``ranks``: each pair's rank (None unless by rank); ``note``: why name order."""

    pairs: tuple[tuple[Path, Path], ...]
    by: str
    ranks: tuple[int | None, ...]
    note: str = ""


def two_files(a: Path, b: Path) -> RankPairs:
    return RankPairs(((a, b),), BY_FILES, (None,))


def pair_ranks(
    files_a: Sequence[Path],
    files_b: Sequence[Path],
    rank_of: Callable[[Path], int | None] | None = None,
) -> RankPairs:
    """``files_a`` / ``files_b`` in name order, as many on each side (the caller says so to the
    user); ``rank_of``: a file's rank (default: its distributedInfo's)."""
    if len(files_a) != len(files_b):
        raise ValueError(f"{len(files_a)} files in A, {len(files_b)} in B: as many needed")
    rank_of = rank_of or header_rank
    ranks_a, ranks_b = [rank_of(f) for f in files_a], [rank_of(f) for f in files_b]
    note = _why_not_by_rank(files_a, ranks_a, "A") or _why_not_by_rank(files_b, ranks_b, "B")
    if not note and sorted(ranks_a) != sorted(ranks_b):  # type: ignore[type-var]
        note = f"ranks differ (A: {_listed(ranks_a)}; B: {_listed(ranks_b)})"
    if note:
        pairs = tuple(zip(files_a, files_b, strict=True))
        return RankPairs(pairs, BY_NAME, (None,) * len(pairs), note)
    file_b = dict(zip(ranks_b, files_b, strict=True))
    order = sorted(zip(ranks_a, files_a, strict=True), key=lambda x: x[0])  # type: ignore[arg-type,return-value]
    return RankPairs(tuple((fa, file_b[r]) for r, fa in order), BY_RANK, tuple(r for r, _ in order))


def header_rank(path: Path) -> int | None:
    """A trace file's distributedInfo rank, from the keys before its events (None: none, or
    the file cannot be read: its load will say why)."""
    from neuron_profiler.errors import TraceLoadError
    from neuron_profiler.trace.loader import read_header

    try:
        return distributed_info_of(read_header(path))[0]
    except (TraceLoadError, OSError):
        return None


def _why_not_by_rank(files: Sequence[Path], ranks: list[int | None], side: str) -> str:
    missing = [f for f, r in zip(files, ranks, strict=True) if r is None]
    if missing:
        return f"{side}'s {missing[0].name} has no distributedInfo rank" + (
            f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        )
    seen: dict[int | None, Path] = {}
    for f, r in zip(files, ranks, strict=True):
        if r in seen:
            return f"{side}'s {seen[r].name} and {f.name} both have rank {r}"
        seen[r] = f
    return ""


def _listed(ranks: list[int | None]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))  # type: ignore[type-var]
