"""Cross-rank analysis: stragglers and collective-wait skew over the ranks of one job::

    summaries = [analyze(trace).rank_summary for trace in traces]   # one per file
    result = distributed(summaries)          # Distributed: spans, per-rank rows, collectives
    result.spans[0].stragglers, result.spans[0].collectives[0].late_rank

A rank's trace is summarised on its own (``rank_summary.py``: steps, compute, its collective
calls, how it reads ranks and collective arrivals; small, so a worker returns it beside the
Report) and only the summaries meet here, so no process needs every rank's trace. Rules
(docs/analysis.md, "Multi-rank"):

- **Ranks**: ``distributedInfo.rank``; a file without one takes no part (counted).
- **Spans**: files are taken by the start of their window (first to last step); each joins the
  first span that has no file of its rank yet and whose window overlaps its own, else opens a
  new span. Two profiling windows of one rank are therefore two spans.
- **Matching**: the k-th call of a group on each rank of the group is one collective instance
  (a rank with collectives on several devices matches each device's calls apart).
- **Clocks**: aligned on collective ends (every rank leaves a collective together): a rank's
  offset is the median over shared instances of (its end - the reference rank's end), the
  reference being the lowest rank (ranks sharing no instance with it go through aligned ones).
- **Skew**: per instance, the last rank to arrive (aligned arrival) is late; every other rank's
  skew wait is the late arrival minus its own.
- **Stragglers**: see ``is_outlier``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis.rank_summary import CollectiveCall, RankSummary

OUTLIER_REL = 0.05  # a straggler is over 5% slower than the median of the other ranks ...
OUTLIER_ABS_NS = 50_000  # ... and by at least 50 µs (the idle-gap threshold: noise below it)
METRIC_STEP = "step_time"
METRIC_COMPUTE = "compute_before_collective"
REASON_NO_RANK = "no trace has a rank in distributedInfo (not a torch.distributed run)"
REASON_ONE_RANK = "only one rank ({}): cross-rank analysis needs two or more ranks"
REASON_NO_SHARED = "no span holds two or more ranks (their profiling windows do not overlap)"


@dataclass(frozen=True)
class RankRow:
    """Per rank of a span. Means are per matched collective instance or per step."""

    rank: int
    source: str
    steps: int
    step_mean_ns: int
    compute_ns_per_step: int
    collective_ns_per_step: int
    compute_before_mean_ns: int
    late_arrivals: int
    wait_recorded_ns: int | None  # None: the trace records no collective waits
    wait_skew_ns: int
    clock_offset_ns: int
    clock_aligned: bool
    orphan_waits: int = 0  # wait rows with no collective after them (not in any wait figure)
    orphan_wait_ns: int = 0


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective (group and name) over its matched instances."""

    group: str
    name: str
    ranks: tuple[int, ...]
    calls: int
    mean_skew_ns: int
    max_skew_ns: int
    late_rank: int  # the rank that arrived last most often
    late_counts: tuple[int, ...]  # per rank in ``ranks``: instances it arrived last
    wait_skew_ns: tuple[int, ...]  # per rank: Σ (late arrival - its arrival)
    wait_recorded_ns: tuple[int | None, ...]  # per rank: Σ its collective-wait rows


@dataclass(frozen=True)
class Straggler:
    rank: int
    metric: str  # METRIC_STEP or METRIC_COMPUTE
    value_ns: int
    others_median_ns: int


@dataclass(frozen=True)
class Unmatched:
    """Calls of a group left over on a rank (its window holds more of them than another's)."""

    rank: int
    group: str
    calls: int


@dataclass(frozen=True)
class SpanAnalysis:
    index: int
    sources: tuple[str, ...]
    ranks: tuple[int, ...]
    world_size: int | None
    reason: str | None  # why this span has no cross-rank analysis (None: it has one)
    reference_rank: int
    rows: tuple[RankRow, ...]
    collectives: tuple[CollectiveSkew, ...]
    stragglers: tuple[Straggler, ...]
    unmatched: tuple[Unmatched, ...]
    mismatched_names: int  # matched instances whose ranks name different collectives


@dataclass(frozen=True)
class Distributed:
    """``available``: some span was analysed across ranks; else ``reason`` says why not."""

    spans: tuple[SpanAnalysis, ...]
    without_rank: tuple[str, ...]
    reason: str | None

    @property
    def available(self) -> bool:
        return self.reason is None


# -- spans ------------------------------------------------------------------------------------
def group_spans(summaries: list[RankSummary]) -> list[list[RankSummary]]:
    """Spans of files with a rank: at most one file per rank, overlapping windows."""
    spans: list[list[RankSummary]] = []
    for s in sorted(summaries, key=lambda s: (s.window_start_ns, s.rank, s.source)):
        for span in spans:
            if all(o.rank != s.rank for o in span) and any(
                o.window_start_ns < s.window_end_ns and s.window_start_ns < o.window_end_ns
                for o in span
            ):
                span.append(s)
                break
        else:
            spans.append([s])
    return [sorted(span, key=lambda s: s.rank) for span in spans]  # type: ignore[arg-type, return-value]


# -- across ranks -----------------------------------------------------------------------------
def is_outlier(value: float, others: list[float]) -> bool:
    """A rank's value is an outlier when it exceeds the median of the *other* ranks by more
    than OUTLIER_REL of that median and by at least OUTLIER_ABS_NS (the median of the others,
    not of all, so that two ranks can be told apart)."""
    if not others:
        return False
    m = float(np.median(others))
    return value > m * (1 + OUTLIER_REL) and value - m >= OUTLIER_ABS_NS


def distributed(summaries: list[RankSummary]) -> Distributed:
    ranked = [s for s in summaries if s.rank is not None]
    without = tuple(s.source for s in summaries if s.rank is None)
    spans = tuple(_span(i, span) for i, span in enumerate(group_spans(ranked)))
    if not ranked:
        reason: str | None = REASON_NO_RANK
    elif len({s.rank for s in ranked}) == 1:
        reason = REASON_ONE_RANK.format(f"rank {ranked[0].rank}")
    elif all(s.reason for s in spans):
        reason = REASON_NO_SHARED
    else:
        reason = None
    return Distributed(spans=spans, without_rank=without, reason=reason)


@dataclass
class _Instances:
    """Matched instances of one (group): arrays [rank position, instance]."""

    ranks: list[int]
    arrival: np.ndarray
    end: np.ndarray
    wait: np.ndarray
    compute: np.ndarray


def _span(index: int, span: list[RankSummary]) -> SpanAnalysis:
    ranks = [s.rank for s in span]
    assert all(r is not None for r in ranks)
    base = dict(
        index=index,
        sources=tuple(s.source for s in span),
        ranks=tuple(ranks),
        world_size=span[0].world_size,
        reference_rank=ranks[0],
    )
    if len(span) < 2:
        return SpanAnalysis(
            **base,
            reason=REASON_ONE_RANK.format(f"rank {ranks[0]}"),  # type: ignore[arg-type]
            rows=(),
            collectives=(),
            stragglers=(),
            unmatched=(),
            mismatched_names=0,
        )
    groups, unmatched, mismatched = _match(span)
    # a producer that records waits records them on every rank: a rank without any never waited
    recorded_known = any(s.recorded_waits for s in span)
    offsets, aligned = _clock_offsets(ranks, groups)  # type: ignore[arg-type]
    pos = {r: i for i, r in enumerate(ranks)}
    n = len(ranks)
    late = np.zeros(n, np.int64)
    skew_wait = np.zeros(n, np.int64)
    recorded = np.zeros(n, np.int64)
    compute_sum = np.zeros(n, np.int64)
    compute_n = np.zeros(n, np.int64)
    collectives = []
    for (group, name), inst in sorted(groups.items()):
        p = np.array([pos[r] for r in inst.ranks])
        a = inst.arrival - np.array([offsets[r] for r in inst.ranks])[:, None]
        last = np.argmax(a, axis=0)
        skew = a.max(axis=0) - a.min(axis=0)
        waits = (a.max(axis=0)[None, :] - a).sum(axis=1)
        counts = np.bincount(last, minlength=len(p))
        np.add.at(late, p, counts)
        np.add.at(skew_wait, p, waits)
        np.add.at(recorded, p, inst.wait.sum(axis=1))
        np.add.at(compute_sum, p, inst.compute.sum(axis=1))
        np.add.at(compute_n, p, inst.compute.shape[1])
        collectives.append(
            CollectiveSkew(
                group=group,
                name=name,
                ranks=tuple(inst.ranks),
                calls=int(a.shape[1]),
                mean_skew_ns=int(skew.mean()),
                max_skew_ns=int(skew.max()),
                late_rank=inst.ranks[int(np.argmax(counts))],
                late_counts=tuple(counts.tolist()),
                wait_skew_ns=tuple(waits.astype(int).tolist()),
                wait_recorded_ns=tuple(
                    int(w) if recorded_known else None for w in inst.wait.sum(axis=1).tolist()
                ),
            )
        )
    rows = []
    for i, s in enumerate(span):
        steps = max(len(s.step_wall_ns), 1)
        rows.append(
            RankRow(
                rank=ranks[i],
                source=s.source,
                steps=len(s.step_wall_ns),  # type: ignore[arg-type]
                step_mean_ns=int(np.mean(s.step_wall_ns)) if s.step_wall_ns else 0,
                compute_ns_per_step=s.compute_ns // steps,
                collective_ns_per_step=s.collective_ns // steps,
                compute_before_mean_ns=int(compute_sum[i] // compute_n[i]) if compute_n[i] else 0,
                late_arrivals=int(late[i]),
                wait_recorded_ns=int(recorded[i]) if recorded_known else None,
                wait_skew_ns=int(skew_wait[i]),
                clock_offset_ns=int(offsets[ranks[i]]),  # type: ignore[index]
                clock_aligned=bool(aligned[ranks[i]]),  # type: ignore[index]
                orphan_waits=s.orphan_waits,
                orphan_wait_ns=s.orphan_wait_ns,
            )
        )
    return SpanAnalysis(
        **base,
        reason=None,
        rows=tuple(rows),  # type: ignore[arg-type]
        collectives=tuple(collectives),
        stragglers=_stragglers(rows, compute_n),
        unmatched=tuple(unmatched),
        mismatched_names=mismatched,
    )


def _match(
    span: list[RankSummary],
) -> tuple[dict[tuple[str, str], _Instances], list[Unmatched], int]:
    """Instances by (group, name of the lowest rank's call), matched by order in the group."""
    by_group: dict[str, dict[int, list[CollectiveCall]]] = defaultdict(dict)
    for s in span:
        for c in s.calls:
            by_group[c.group].setdefault(s.rank, []).append(c)  # type: ignore[arg-type]
    out: dict[tuple[str, str], list] = defaultdict(list)
    unmatched, mismatched = [], 0
    for group, per_rank in sorted(by_group.items()):
        ranks = sorted(per_rank)
        n = min(len(v) for v in per_rank.values()) if len(ranks) > 1 else 0
        unmatched += [
            Unmatched(rank=r, group=group, calls=len(per_rank[r]) - n)
            for r in ranks
            if len(per_rank[r]) > n
        ]
        for k in range(n):
            calls = [per_rank[r][k] for r in ranks]
            mismatched += len({c.name for c in calls}) > 1
            out[(group, calls[0].name)].append((ranks, calls))
    result = {}
    for key, items in out.items():
        # one group has one rank set: every instance of it lists the same ranks
        ranks = items[0][0]
        grid = [[calls[i] for _, calls in items] for i in range(len(ranks))]
        result[key] = _Instances(
            ranks=ranks,
            arrival=np.array([[c.arrival_ns for c in row] for row in grid], np.int64),
            end=np.array([[c.end_ns for c in row] for row in grid], np.int64),
            wait=np.array([[c.wait_ns for c in row] for row in grid], np.int64),
            compute=np.array([[c.compute_before_ns for c in row] for row in grid], np.int64),
        )
    return result, unmatched, mismatched


def _clock_offsets(
    ranks: list[int], groups: dict[tuple[str, str], _Instances]
) -> tuple[dict[int, int], dict[int, bool]]:
    """Each rank's clock minus the reference's, from collective ends (median over shared
    instances); ranks reached through already-aligned ranks when they share none with it."""
    diffs: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
    for inst in groups.values():
        for i, a in enumerate(inst.ranks):
            for j, b in enumerate(inst.ranks):
                if a != b:
                    diffs[(a, b)].append(inst.end[i] - inst.end[j])
    offsets = {ranks[0]: 0}
    changed = True
    while changed:
        changed = False
        for r in ranks:
            if r in offsets:
                continue
            via = [(b, np.concatenate(diffs[(r, b)])) for b in offsets if diffs.get((r, b))]
            if via:
                b, d = via[0]
                offsets[r] = offsets[b] + int(np.median(d))
                changed = True
    aligned = {r: r in offsets for r in ranks}
    return {r: offsets.get(r, 0) for r in ranks}, aligned


def _stragglers(rows: list[RankRow], compute_n: np.ndarray) -> tuple[Straggler, ...]:
    out = []
    for metric, values, usable in (
        (METRIC_STEP, [r.step_mean_ns for r in rows], [r.steps > 0 for r in rows]),
        (METRIC_COMPUTE, [r.compute_before_mean_ns for r in rows], (compute_n > 0).tolist()),
    ):
        for i, row in enumerate(rows):
            others = [v for j, v in enumerate(values) if j != i and usable[j]]
            if usable[i] and is_outlier(values[i], others):
                out.append(
                    Straggler(
                        rank=row.rank,
                        metric=metric,
                        value_ns=values[i],
                        others_median_ns=int(np.median(others)),
                    )
                )
    return tuple(out)
