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
- **Skew**: per instance, the rank whose aligned arrival is latest, by any margin and alone, is
  late (a tie: no rank is); every other rank's skew wait is the latest arrival minus its own.
- **Straggler**: the rank late in the most instances of the span (alone: a tie names none), when
  the waits its late arrivals cause cost the ranks that wait for it, on average, at least
  ``STRAGGLER_REL`` of their mean step and ``STRAGGLER_ABS_NS`` per step. Step times never
  decide (a rank whose profiled steps began earlier has longer steps and still waits). What it
  was doing before its late arrivals: its device's activity in the window before each
  (``rank_summary.ACTIVITIES``: compute, copies, other collectives, idle time by cause) against
  the other ranks' before the same instances; the one with the most extra time (``_doing``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis.rank_summary import IDLE_PREFIX, CollectiveCall, RankSummary

STRAGGLER_REL = 0.05  # a straggler costs the ranks waiting for it >= 5% of their mean step ...
STRAGGLER_ABS_NS = 50_000  # ... and >= 50 µs per step (the idle-gap threshold: noise below it)
STRAGGLER_RULE = (  # what every renderer says the rule is (docs/analysis.md, Multi-rank)
    "the rank whose late arrivals (alone last at a collective, clocks aligned on collective "
    "ends) cost the other ranks the most per step, net of what it waited for them, when that "
    f"is >= {100 * STRAGGLER_REL:g}% of their mean step and >= {STRAGGLER_ABS_NS / 1e3:g} µs "
    "per step; step times alone never decide"
)
REASON_NO_RANK = "no trace has a rank in distributedInfo (not a torch.distributed run)"
REASON_ONE_RANK = "only one rank ({}): cross-rank analysis needs two or more ranks"
REASON_NO_SHARED = "no span holds two or more ranks (their profiling windows do not overlap)"
REASON_NO_DEVICE = "no rank has device work (CPU-only traces): no device time to compare"
NO_MATCH = "no collective matched across the ranks"
NO_LATE = "no rank arrived last alone at any matched collective (the ranks arrive together)"
TIE = "ranks {} cost the others equally ({:.3f} ms per step net of their own waits): no single straggler"
UNDER_RULE = (
    "rank {} (last at {} of {} instances) costs the ranks waiting for it "
    "{:.3f} ms per step net of its own waits ({:.1f}% of their step): under the rule "
    "({:g}% and {:g} µs)"
)


@dataclass(frozen=True)
class RankRow:
    """Per rank of a span; every time is per step of that rank (``steps``, at least 1)."""

    rank: int
    source: str
    steps: int
    step_mean_ns: int
    compute_ns_per_step: int
    collective_ns_per_step: int
    compute_before_ns_per_step: int  # device compute before its matched collectives
    instances: int  # matched collective instances it took part in
    late_arrivals: int  # instances it arrived last (alone)
    wait_recorded_ns_per_step: int | None  # None: the trace records no collective waits
    wait_skew_ns_per_step: int
    clock_offset_ns: int
    clock_aligned: bool
    orphan_waits: int = 0  # wait rows with no collective after them (not in any wait figure)
    orphan_wait_ns: int = 0  # over the span


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective (group and name) over its matched instances."""

    group: str
    name: str
    ranks: tuple[int, ...]
    calls: int
    mean_skew_ns: int
    max_skew_ns: int
    late_rank: int | None  # the rank that arrived last most often (None: no rank ever alone)
    late_counts: tuple[int, ...]  # per rank in ``ranks``: instances it arrived last (alone)
    wait_skew_ns: tuple[int, ...]  # per rank: Σ (late arrival - its arrival)
    wait_recorded_ns: tuple[int | None, ...]  # per rank: Σ its collective-wait rows

    @property
    def longest_waits(self) -> tuple[tuple[int, int], ...]:
        """(rank, wait_skew_ns) per rank, the longest wait first (ties: lower rank first)."""
        return tuple(sorted(zip(self.ranks, self.wait_skew_ns, strict=True), key=lambda p: -p[1]))


@dataclass(frozen=True)
class Activity:
    """What the straggler's device did before its late arrivals (``rank_summary.ACTIVITIES``):
    mean ns per late arrival, and the other ranks' mean before the same instances."""

    name: str
    ns: int
    others_ns: int

    @property
    def excess_ns(self) -> int:
        return self.ns - self.others_ns


@dataclass(frozen=True)
class Straggler:
    """The rank that arrives last (docs/analysis.md, "Multi-rank")."""

    rank: int
    late_arrivals: int  # instances it arrived last (alone)
    instances: int  # matched instances it took part in
    cost_ns_per_step: int  # mean over the ranks that waited for it
    cost_per_rank: tuple[tuple[int, int], ...]  # (rank, its wait for this one, ns per step)
    lateness_ns: int  # mean over its late arrivals: its arrival - the next latest arrival
    before: tuple[Activity, ...]  # the most extra time first
    doing: str  # what it was doing while the others waited (``_doing``)


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
    rows: tuple[RankRow, ...]  # by rank
    collectives: tuple[CollectiveSkew, ...]  # the most skew in all (mean x calls) first
    stragglers: tuple[Straggler, ...]  # at most one
    unmatched: tuple[Unmatched, ...]
    mismatched_names: int  # matched instances whose ranks name different collectives
    straggler_note: str | None = None  # why no rank is named (None when one is, or no analysis)

    def rows_within(self, top: int) -> tuple[RankRow, ...]:
        """At most ``top`` rows, by rank, the straggler's always among them: a table cut by
        ``--top`` still shows the rank the analysis names."""
        late = {x.rank for x in self.stragglers}
        kept = [r for r in self.rows if r.rank in late][:top]
        others = [r for r in self.rows if r.rank not in late][: max(top - len(kept), 0)]
        return tuple(sorted(kept + others, key=lambda r: r.rank))


@dataclass(frozen=True)
class Distributed:
    """``available``: some span was analysed across ranks; else ``reason`` says why not."""

    spans: tuple[SpanAnalysis, ...]
    without_rank: tuple[str, ...]
    reason: str | None

    def shown_with(self, traces: int) -> bool:
        """Whether a report of ``traces`` traces has a cross-rank section: over several traces
        (it then says why it is unavailable), or over one when it is available."""
        return traces > 1 or self.available

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
def distributed(summaries: list[RankSummary]) -> Distributed:
    ranked = [s for s in summaries if s.rank is not None]
    without = tuple(s.source for s in summaries if s.rank is None)
    spans = tuple(_span(i, span) for i, span in enumerate(group_spans(ranked)))
    if not ranked:
        reason: str | None = REASON_NO_RANK
    elif len({s.rank for s in ranked}) == 1:
        reason = REASON_ONE_RANK.format(f"rank {ranked[0].rank}")
    elif all(s.reason for s in spans):
        no_device = any(s.reason == REASON_NO_DEVICE for s in spans)
        reason = REASON_NO_DEVICE if no_device else REASON_NO_SHARED
    else:
        reason = None
    return Distributed(spans=spans, without_rank=without, reason=reason)


@dataclass
class _Instances:
    """Matched instances of one (group): arrays [rank position, instance] (``before``: [rank
    position, instance, activity])."""

    ranks: list[int]
    arrival: np.ndarray
    end: np.ndarray
    wait: np.ndarray
    compute: np.ndarray
    before: np.ndarray


@dataclass
class _Late:
    """Sums over a span's instances, per rank position (``cost[r, j]``: Σ over r's late
    instances of r's arrival - j's; ``own`` / ``others``: Σ over r's late instances of its
    activity before arriving, and of the mean of the other ranks')."""

    count: np.ndarray
    instances: np.ndarray
    cost: np.ndarray
    lateness: np.ndarray
    own: np.ndarray
    others: np.ndarray

    @classmethod
    def zeros(cls, n: int, activities: int) -> _Late:
        return cls(
            count=np.zeros(n, np.int64),
            instances=np.zeros(n, np.int64),
            cost=np.zeros((n, n), np.int64),
            lateness=np.zeros(n, np.int64),
            own=np.zeros((n, activities), np.int64),
            others=np.zeros((n, activities), np.float64),
        )

    def add(self, p: np.ndarray, a: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Add one group's instances (``p``: their ranks' positions, ``a``: aligned arrivals
        [rank, instance]); returns each instance's late rank (index into p; -1: a tie)."""
        n_ranks, n_inst = a.shape
        order = np.sort(a, axis=0)
        latest = order[-1]
        second = order[-2] if n_ranks > 1 else latest
        last = np.where(latest > second, np.argmax(a, axis=0), -1)
        self.instances[p] += n_inst
        for i in range(n_ranks):
            mine = np.flatnonzero(last == i)
            if not len(mine):
                continue
            self.count[p[i]] += len(mine)
            np.add.at(self.cost[p[i]], p, (a[i, mine][None, :] - a[:, mine]).sum(axis=1))
            self.lateness[p[i]] += int((latest[mine] - second[mine]).sum())
            self.own[p[i]] += before[i, mine].sum(axis=0)
            rest = np.delete(before[:, mine], i, axis=0)  # [other rank, instance, activity]
            self.others[p[i]] += rest.mean(axis=0).sum(axis=0)
        return last


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
    if len(span) < 2 or not any(s.has_device for s in span):
        return SpanAnalysis(
            **base,
            reason=REASON_ONE_RANK.format(f"rank {ranks[0]}")  # type: ignore[arg-type]
            if len(span) < 2
            else REASON_NO_DEVICE,
            rows=(),
            collectives=(),
            stragglers=(),
            unmatched=(),
            mismatched_names=0,
        )
    activities = _activities(span)
    groups, unmatched, mismatched = _match(span, activities)
    # a producer that records waits records them on every rank: a rank without any never waited
    recorded_known = any(s.recorded_waits for s in span)
    offsets, aligned = _clock_offsets(ranks, groups)  # type: ignore[arg-type]
    pos = {r: i for i, r in enumerate(ranks)}
    n = len(ranks)
    late = _Late.zeros(n, len(activities))
    skew_wait = np.zeros(n, np.int64)
    recorded = np.zeros(n, np.int64)
    compute_sum = np.zeros(n, np.int64)
    collectives = []
    for (group, name), inst in sorted(groups.items()):
        p = np.array([pos[r] for r in inst.ranks])
        a = inst.arrival - np.array([offsets[r] for r in inst.ranks])[:, None]
        last = late.add(p, a, inst.before)
        skew = a.max(axis=0) - a.min(axis=0)
        waits = (a.max(axis=0)[None, :] - a).sum(axis=1)
        counts = np.bincount(last[last >= 0], minlength=len(p))
        np.add.at(skew_wait, p, waits)
        np.add.at(recorded, p, inst.wait.sum(axis=1))
        np.add.at(compute_sum, p, inst.compute.sum(axis=1))
        collectives.append(
            CollectiveSkew(
                group=group,
                name=name,
                ranks=tuple(inst.ranks),
                calls=int(a.shape[1]),
                mean_skew_ns=int(skew.mean()),
                max_skew_ns=int(skew.max()),
                late_rank=inst.ranks[int(np.argmax(counts))] if counts.any() else None,
                late_counts=tuple(counts.tolist()),
                wait_skew_ns=tuple(waits.astype(int).tolist()),
                wait_recorded_ns=tuple(
                    int(w) if recorded_known else None for w in inst.wait.sum(axis=1).tolist()
                ),
            )
        )
    rows = []
    for i, s in enumerate(span):
        steps = _steps(s)
        rows.append(
            RankRow(
                rank=ranks[i],  # type: ignore[arg-type]
                source=s.source,
                steps=len(s.step_wall_ns),
                step_mean_ns=int(np.mean(s.step_wall_ns)) if s.step_wall_ns else 0,
                compute_ns_per_step=s.compute_ns // steps,
                collective_ns_per_step=s.collective_ns // steps,
                compute_before_ns_per_step=int(compute_sum[i]) // steps,
                instances=int(late.instances[i]),
                late_arrivals=int(late.count[i]),
                wait_recorded_ns_per_step=int(recorded[i]) // steps if recorded_known else None,
                wait_skew_ns_per_step=int(skew_wait[i]) // steps,
                clock_offset_ns=int(offsets[ranks[i]]),  # type: ignore[index]
                clock_aligned=bool(aligned[ranks[i]]),  # type: ignore[index]
                orphan_waits=s.orphan_waits,
                orphan_wait_ns=s.orphan_wait_ns,
            )
        )
    straggler, note = _straggler(rows, late, activities)
    return SpanAnalysis(
        **base,
        reason=None,
        rows=tuple(rows),  # type: ignore[arg-type]
        # (stable: equal totals stay in (group, name) order)
        collectives=tuple(sorted(collectives, key=lambda c: -c.mean_skew_ns * c.calls)),
        stragglers=(straggler,) if straggler else (),
        unmatched=tuple(unmatched),
        mismatched_names=mismatched,
        straggler_note=note,
    )


def _steps(s: RankSummary) -> int:
    """The per-step denominator of a rank: its step count (a trace without steps: 1)."""
    return max(len(s.step_wall_ns), 1)


def _activities(span: list[RankSummary]) -> list[str]:
    """Every activity label the span's summaries use, in order of first appearance."""
    out: list[str] = []
    for s in span:
        out += [a for a in s.activities if a not in out]
    return out


def _straggler(
    rows: list[RankRow], late: _Late, activities: list[str]
) -> tuple[Straggler | None, str | None]:
    """The rank whose late arrivals cost the other ranks the most per step, net of what it
    waited for them (``_net_costs``), when that costs the ranks waiting for it at least
    STRAGGLER_REL of their mean step and STRAGGLER_ABS_NS per step; else None and why not.
    Not the rank late most often: with several collectives a step, noise at the small ones
    outnumbers one long wait at a big one."""
    if not late.instances.any():
        return None, NO_MATCH
    if int(late.count.max()) == 0:
        return None, NO_LATE
    net = _net_costs(rows, late)
    best = float(net.max())
    tied = np.flatnonzero(np.abs(net - best) <= 1.0)  # (ns: equal but for rounding)
    if len(tied) > 1:
        return None, TIE.format(" and ".join(str(rows[i].rank) for i in tied), best / 1e6)
    r = int(tied[0])
    top = int(late.count[r])
    waiting = [j for j in range(len(rows)) if j != r and late.cost[r, j] > 0]
    cost = {rows[j].rank: int(late.cost[r, j]) // max(rows[j].steps, 1) for j in waiting}
    mean_cost = float(np.mean(list(cost.values()))) if cost else 0.0
    step = float(np.mean([rows[j].step_mean_ns for j in waiting])) if waiting else 0.0
    pct = 100 * best / step if step else 0.0
    if top == 0 or best < STRAGGLER_ABS_NS or best < STRAGGLER_REL * step:
        return None, UNDER_RULE.format(
            rows[r].rank,
            top,
            int(late.instances[r]),
            best / 1e6,
            pct,
            100 * STRAGGLER_REL,
            STRAGGLER_ABS_NS / 1e3,
        )
    before = sorted(
        (
            Activity(name=name, ns=int(own) // top, others_ns=int(round(others / top)))
            for name, own, others in zip(
                activities, late.own[r].tolist(), late.others[r].tolist(), strict=True
            )
            if own or others
        ),
        key=lambda x: (-x.excess_ns, -x.ns),
    )
    return (
        Straggler(
            rank=rows[r].rank,
            late_arrivals=top,
            instances=int(late.instances[r]),
            cost_ns_per_step=int(round(mean_cost)),
            cost_per_rank=tuple(cost.items()),
            lateness_ns=int(late.lateness[r]) // top,
            before=tuple(before),
            doing=_doing(before),
        ),
        None,
    )


def _net_costs(rows: list[RankRow], late: _Late) -> np.ndarray:
    """Per rank r: what its late arrivals cost each other rank per step of that rank, the mean
    over the other ranks, less what r waited for them per step of its own (the same mean): a
    rank that waits as much as it is waited for (two ranks' noise) costs nothing net."""
    n = len(rows)
    steps = np.array([max(row.steps, 1) for row in rows], np.float64)
    cost = late.cost.astype(np.float64)
    out = (cost / steps[None, :]).sum(axis=1) / max(n - 1, 1)
    waited = cost.sum(axis=0) / steps / max(n - 1, 1)
    return out - waited


def _doing(before: list[Activity]) -> str:
    """What the straggler was doing while the others waited: of its device's busy activities
    and its idle time (all causes together), the one with the most extra time over the other
    ranks'; idle time is named by its cause with the most extra time."""
    if not before:
        return ""
    idle = [a for a in before if a.name.startswith(IDLE_PREFIX)]
    kinds = [(a.excess_ns, a.name) for a in before if a not in idle]
    if idle:
        kinds.append((sum(a.excess_ns for a in idle), idle[0].name))  # idle: sorted by excess
    return max(kinds, key=lambda k: k[0])[1]


def _match(
    span: list[RankSummary], activities: list[str]
) -> tuple[dict[tuple[str, str], _Instances], list[Unmatched], int]:
    """Instances by (group, name of the lowest rank's call), matched by order in the group."""
    by_group: dict[str, dict[int, list[CollectiveCall]]] = defaultdict(dict)
    columns: dict[int, list[int]] = {}  # per rank: its activities' columns in ``activities``
    for s in span:
        columns[s.rank] = [activities.index(a) for a in s.activities]  # type: ignore[index]
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
            before=np.stack(
                [
                    _before_grid(row, columns[r], len(activities))
                    for r, row in zip(ranks, grid, strict=True)
                ]
            ),
        )
    return result, unmatched, mismatched


def _before_grid(calls: list[CollectiveCall], columns: list[int], n: int) -> np.ndarray:
    """[instance, activity] ns before each of one rank's calls (zeros where a call has none)."""
    out = np.zeros((len(calls), n), np.int64)
    for k, c in enumerate(calls):
        out[k, columns[: len(c.before_ns)]] = c.before_ns[: len(columns)]
    return out


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
