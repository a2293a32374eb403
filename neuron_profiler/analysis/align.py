"""Which work of trace A is which work of trace B, for two traces of the same script (before
and after a change, CUDA and Trainium): the one alignment that the diff, and later the
projection and the memory comparison, read::

    al = align(AnalysisContext(trace_a), AnalysisContext(trace_b), steps="auto")
    al.steps.a, al.steps.b                  # the steps compared, pairwise
    al.keys[al.key_a[i]]                    # what A's op i was matched to (an AlignKey)

In this order (docs/diff.md#alignment):

1. **Steps**: ``ProfilerStep#N`` present in both, by number; by position when no number is
   common (or when asked: ``StepChoice``).
2. **Ops**: the outermost ops of the host threads (``cpu_op`` and CPU-fallback rows; an op
   inside another op is part of it), each in the step its start lies in.
3. **Segments**: each op takes the label of its innermost anchor (a ``record_function`` or
   module annotation, ``Optimizer.step#...``, the DataLoader's ``__next__``; 2021 traces
   record these as ops) or, outside any, of its autograd phase: ``backward`` for backward
   nodes and the threads that run them, ``forward`` before the step's first backward node,
   ``after backward`` after its last. A segment is one step's ops of one label; segments are
   matched by (step pair, label).
4. **Op sequences**: inside a matched segment pair, runs of one normalised name
   (``name_map``: cuDNN / MIOpen convolutions, SDPA variants, ``CPU fallback: <op>``,
   ``_foreach_*`` vs per-tensor loops) are units, and the unit sequences are matched by
   longest matching blocks (difflib's). A stretch that differs on both sides between two
   matched units is matched as one **fused** group: the lowest common context of a fused
   execution (a compiled graph, a Triton kernel) and the ops it replaced. A stretch on one
   side only is **unmatched**.

Never O(n·m) over a whole trace: a segment pair is at most one step's ops of one label, and a
pair of more than ``MAX_CELLS`` unit pairs, or any pair once the diff has spent
``CELL_BUDGET`` unit pairs on sequence matching, is matched by occurrence instead (the k-th
unit of a name in A with the k-th in B: a sort, O((n + m) log(n + m))), so the cost is at most
O(CELL_BUDGET + (n + m) log(n + m)) whatever the traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property

import numpy as np

from neuron_profiler.analysis._tree import innermost_marked, outermost_marked, parents
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.name_map import NameMap
from neuron_profiler.analysis.steps import Steps, step_rows
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V

MAX_CELLS = 1_000_000  # unit pairs a segment pair may cost difflib (~1 s in the worst case)
CELL_BUDGET = 10_000_000  # unit pairs all segment pairs of a diff may cost difflib (~5 s at worst)
FUSED_NAMES = 3  # names a fused group's key lists per side
TREE_KINDS = (
    S.EventKind.CPU_OP,
    S.EventKind.USER_ANNOTATION,
    S.EventKind.RUNTIME,
    S.EventKind.FALLBACK,
    S.EventKind.DATALOADER,
)
OP_KINDS = (S.EventKind.CPU_OP, S.EventKind.FALLBACK)
FORWARD, BACKWARD, AFTER_BACKWARD, DATALOADER = (
    "forward",
    "backward",
    "after backward",
    "DataLoader",
)
_STEP_LIST = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")
MATCHED, UNMATCHED, FUSED = "op", "unmatched", "fused"


# -- steps -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepChoice:
    """Which steps to compare: ``by`` "auto" (every step number in both; by position when none
    is), "number", "position"; ``ranges``: only the step numbers in these inclusive ranges (by
    number), kept as ranges so that ``0-1000000000`` costs nothing."""

    by: str = "auto"
    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, text: str) -> StepChoice:
        """``auto``, ``number``, ``position``, or step numbers: ``5-8``, ``5,7,9``."""
        text = text.strip()
        if text in ("auto", "number", "position"):
            return cls(by=text)
        if not _STEP_LIST.match(text):
            raise NeuronProfilerError(
                f"--steps {text!r}: expected auto, number, position or step numbers "
                "(e.g. 5-8 or 5,7,9)",
                exit_code=2,
            )
        ranges: list[tuple[int, int]] = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if last < first:
                raise NeuronProfilerError(
                    f"--steps {text!r}: range {first}-{last} runs backwards (write {last}-{first})",
                    exit_code=2,
                )
            ranges.append((first, last))
        return cls(by="number", ranges=tuple(ranges))

    def chosen(self, numbers: list[str]) -> tuple[list[str], list[int], int]:
        """Of ``numbers`` (step names), those in the ranges, in order; the first
        ``MISSING_SHOWN`` wanted numbers not among them, and how many are missing in all."""
        present = {int(n) for n in numbers if n.isdigit()}
        kept = list(dict.fromkeys(n for n in numbers if n.isdigit() and self._wants(int(n))))
        wanted_total = sum(last - first + 1 for first, last in _merged(self.ranges))
        missing_count = wanted_total - len({int(n) for n in kept})
        shown: list[int] = []
        for first, last in _merged(self.ranges):
            number = first
            while number <= last and len(shown) < MISSING_SHOWN and len(shown) < missing_count:
                if number not in present:
                    shown.append(number)
                number += 1
        return kept, shown, missing_count

    def _wants(self, number: int) -> bool:
        return any(first <= number <= last for first, last in self.ranges)


MISSING_SHOWN = 10


def _merged(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """Overlapping or touching ranges joined, so no number is counted twice."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


@dataclass(frozen=True)
class StepPairs:
    """The steps compared: ``a[k]`` and ``b[k]`` index each side's ``Steps``; ``by``: "number"
    or "position"."""

    a: np.ndarray
    b: np.ndarray
    by: str

    def __len__(self) -> int:
        return len(self.a)


def pair_steps(a: Steps, b: Steps, choice: StepChoice = StepChoice()) -> StepPairs:
    both = [n for n in a.names if n in set(b.names)]
    if choice.ranges:
        wanted, missing, missing_count = choice.chosen(both)
        if missing_count:
            listed = ", ".join(map(str, missing))
            more = (
                f" and {missing_count - len(missing)} more" if missing_count > len(missing) else ""
            )
            raise NeuronProfilerError(
                f"--steps: step {listed}{more} not in both traces "
                f"(A has {_names(a)}, B has {_names(b)})",
                exit_code=2,
            )
        both = sorted(wanted, key=int)
    by_number = choice.by == "number" or (choice.by == "auto" and both and _numbered(a, b))
    if by_number:
        if not both:
            raise NeuronProfilerError(
                f"--steps number: no step number in both traces (A has {_names(a)}, "
                f"B has {_names(b)})",
                exit_code=2,
            )
        index_a, index_b = (
            {n: i for i, n in enumerate(a.names)},
            {n: i for i, n in enumerate(b.names)},
        )
        return StepPairs(
            np.array([index_a[n] for n in both]), np.array([index_b[n] for n in both]), "number"
        )
    n = min(len(a), len(b))
    return StepPairs(np.arange(n), np.arange(n), "position")


def _numbered(a: Steps, b: Steps) -> bool:
    return a.from_profiler_steps and b.from_profiler_steps


def _names(steps: Steps) -> str:
    """The step names, runs of consecutive numbers written as ranges, at most ``MISSING_SHOWN``
    items (an error line stays one readable line for a run of thousands of steps)."""
    if not steps.from_profiler_steps:
        return "no ProfilerStep"
    items: list[str] = []
    run: list[int] = []
    for name in [*steps.names, ""]:
        if name.isdigit() and run and int(name) == run[-1] + 1:
            run.append(int(name))
            continue
        if run:
            items.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [int(name)] if name.isdigit() else []
        if name and not run:
            items.append(name)
    shown = ", ".join(items[:MISSING_SHOWN])
    return shown if len(items) <= MISSING_SHOWN else f"{shown}, ... ({len(steps.names)} steps)"


# -- the host tree and its ops -----------------------------------------------------------------


@dataclass(frozen=True)
class HostTree:
    """Host rows of the tree kinds (``TREE_KINDS``: no Python frames, no ProfilerStep), sorted
    by (thread, start, -end), with each row's enclosing row (``_tree.parents``), its outermost
    op (``top_op``: a node index, -1 outside ops) and its innermost anchor (``anchor``)."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # dense thread code
    kind: np.ndarray
    name_id: np.ndarray
    parent: np.ndarray
    top_op: np.ndarray
    anchor: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)


def host_tree(ctx: AnalysisContext) -> HostTree:
    host, trace = ctx.host, ctx.trace
    keep = np.isin(host.kind, np.array(TREE_KINDS, np.uint8))
    rows, start, end = host.rows[keep], host.start[keep], host.end[keep]
    c = trace.columns
    thread = thread_codes(c[S.PID][rows], c[S.TID][rows])
    order = np.lexsort((-end, start, thread))
    rows, start, end, thread = rows[order], start[order], end[order], thread[order]
    kind, name_id = c[S.KIND][rows], c[S.NAME_ID][rows]
    anchor_names, dispatch = _name_flags(ctx)
    is_anchor = np.isin(kind, [S.EventKind.USER_ANNOTATION, S.EventKind.DATALOADER]) | (
        (kind == S.EventKind.CPU_OP) & anchor_names[name_id]
    )
    is_op = np.isin(kind, np.array(OP_KINDS, np.uint8)) & ~is_anchor & ~dispatch[name_id]
    parent = parents(thread, start, end)
    return HostTree(
        rows=rows,
        start=start,
        end=end,
        thread=thread,
        kind=kind,
        name_id=name_id,
        parent=parent,
        top_op=outermost_marked(parent, is_op),
        anchor=innermost_marked(parent, is_anchor),
    )


def thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """A dense code per distinct (pid, tid), in (pid, tid) order (one sort)."""
    order = np.lexsort((tid, pid))
    new = np.r_[True, (pid[order][1:] != pid[order][:-1]) | (tid[order][1:] != tid[order][:-1])]
    code = np.empty(len(pid), np.int64)
    code[order] = np.cumsum(new) - 1
    return code


def _name_flags(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """Per string id: an anchor's name (ranges 2021 Kineto recorded as ops, DataLoader spans),
    a dispatch frame's (never an op of its own)."""
    n = len(ctx.trace.strings)
    anchor, dispatch = np.zeros(n, bool), np.zeros(n, bool)
    anchor[ctx.names.anchors] = True
    anchor[ctx.names.dataloader] = True
    dispatch[ctx.names.dispatch_frames] = True
    return anchor, dispatch


@dataclass(frozen=True)
class OpTable:
    """The outermost ops of one trace, as codes (one Python object per distinct name, not per
    op). Per op: ``node`` (index into ``tree``), ``step`` (index into the context's Steps of
    the step its start lies in, -1: none), ``label`` (index into ``labels``: its segment's
    label), ``raw`` (index into ``raw_names``: its name as recorded), ``fallback`` (it is, or
    contains, a CPU-fallback row). Per raw name ``r``: ``names[name_of_raw[r]]`` its
    normalised name, ``rules[r]`` the name-map rules that changed it."""

    tree: HostTree
    node: np.ndarray
    step: np.ndarray
    label: np.ndarray
    labels: tuple[str, ...]
    raw: np.ndarray
    raw_names: tuple[str, ...]
    name_of_raw: np.ndarray
    names: tuple[str, ...]
    rules: tuple[tuple[str, ...], ...]
    fallback: np.ndarray

    def __len__(self) -> int:
        return len(self.node)

    @property
    def name(self) -> np.ndarray:
        """Per op: its normalised name (index into ``names``)."""
        return self.name_of_raw[self.raw]

    @property
    def start(self) -> np.ndarray:
        return self.tree.start[self.node]

    @property
    def end(self) -> np.ndarray:
        return self.tree.end[self.node]

    @cached_property
    def of_node(self) -> np.ndarray:
        """Per tree node: the index of the op it belongs to (-1: outside ops)."""
        index = np.full(len(self.tree), -1, np.int64)
        index[self.node] = np.arange(len(self.node))
        top = self.tree.top_op
        return np.where(top >= 0, index[np.maximum(top, 0)], -1)


def op_table(ctx: AnalysisContext, names: NameMap) -> OpTable:
    tree = host_tree(ctx)
    node = np.flatnonzero(tree.top_op == np.arange(len(tree)))
    steps = ctx.steps
    start = tree.start[node]
    k = np.searchsorted(steps.start_ns, start, side="right") - 1
    host_end = steps.end_ns if steps.host_end_ns is None else steps.host_end_ns
    inside = (k >= 0) & (start < host_end[np.maximum(k, 0)])
    step = np.where(inside, k, -1)
    strings = ctx.trace.strings
    string_ids, raw = np.unique(tree.name_id[node], return_inverse=True)
    raw_names = tuple(strings[i] for i in string_ids.tolist())
    normal = [names.normalise(text) for text in raw_names]
    vocab: dict[str, int] = {}
    name_of_raw = np.array([vocab.setdefault(n, len(vocab)) for n, _ in normal], np.int64)
    fallback = np.zeros(len(tree), bool)
    fallback[tree.kind == S.EventKind.FALLBACK] = True
    has_fallback = np.zeros(len(node), bool)
    of_node = np.full(len(tree), -1, np.int64)
    of_node[node] = np.arange(len(node))
    owners = of_node[tree.top_op[fallback & (tree.top_op >= 0)]]
    has_fallback[owners] = True
    label, labels = _labels(ctx, tree, node, step)
    return OpTable(
        tree=tree,
        node=node,
        step=step,
        label=label,
        labels=labels,
        raw=raw.reshape(-1).astype(np.int64),
        raw_names=raw_names,
        name_of_raw=name_of_raw,
        names=tuple(vocab),
        rules=tuple(rules for _, rules in normal),
        fallback=has_fallback,
    )


PHASES = (FORWARD, BACKWARD, AFTER_BACKWARD, DATALOADER)  # label codes 0-3 (an anchor's: 4 + id)


def _labels(
    ctx: AnalysisContext, tree: HostTree, node: np.ndarray, step: np.ndarray
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each op's segment label (index into the labels returned): its innermost anchor's, else
    its autograd phase."""
    strings = ctx.trace.strings
    backward = np.isin(tree.name_id[node], ctx.names.backward)
    thread = tree.thread[node]
    step_thread = np.isin(thread, _step_threads(ctx, tree))
    backward |= ~step_thread & np.isin(thread, np.unique(thread[backward]))
    first = np.full(len(ctx.steps) + 1, np.iinfo(np.int64).max)
    last = np.full(len(ctx.steps) + 1, np.iinfo(np.int64).min)
    np.minimum.at(first, step[backward], tree.start[node][backward])
    np.maximum.at(last, step[backward], tree.end[node][backward])
    start = tree.start[node]
    phase = np.where(
        backward | ((start >= first[step]) & (start < last[step])),
        PHASES.index(BACKWARD),
        np.where(
            (start >= last[step]) & (last[step] > first[step]),
            PHASES.index(AFTER_BACKWARD),
            PHASES.index(FORWARD),
        ),
    )
    anchor = tree.anchor[node]
    name = tree.name_id[np.maximum(anchor, 0)]
    dataloader = np.isin(name, ctx.names.dataloader) | (
        tree.kind[np.maximum(anchor, 0)] == S.EventKind.DATALOADER
    )
    code = np.where(
        anchor < 0,
        phase,
        np.where(dataloader, PHASES.index(DATALOADER), len(PHASES) + name.astype(np.int64)),
    )
    codes, inverse = np.unique(code, return_inverse=True)
    texts = [PHASES[c] if c < len(PHASES) else strings[c - len(PHASES)] for c in codes.tolist()]
    vocab: dict[str, int] = {}  # two codes may be one label (an annotation named "forward")
    label_of_code = np.array([vocab.setdefault(t, len(vocab)) for t in texts], np.int64)
    return label_of_code[inverse.reshape(-1)], tuple(vocab)


def _step_threads(ctx: AnalysisContext, tree: HostTree) -> np.ndarray:
    """Dense codes of the threads that carry the ProfilerStep annotations (without any: the
    thread with the most ops)."""
    rows, _ = step_rows(ctx.trace, ctx.names)
    c = ctx.trace.columns
    if len(rows):
        pairs = set(zip(c[S.PID][rows].tolist(), c[S.TID][rows].tolist(), strict=True))
        threads, first = np.unique(tree.thread, return_index=True)
        row = tree.rows[first]  # one row per thread: its (pid, tid)
        mine = [
            (p, t) in pairs
            for p, t in zip(c[S.PID][row].tolist(), c[S.TID][row].tolist(), strict=True)
        ]
        return threads[np.array(mine, bool)]
    ops = tree.thread[tree.top_op == np.arange(len(tree))]
    return np.array([np.bincount(ops).argmax()]) if len(ops) else np.zeros(0, np.int64)


# -- the alignment -------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignKey:
    """What a group of ops was matched as: ``kind`` "op" (the same normalised name on both
    sides), "fused" (a stretch differing on both sides, matched as a whole), "unmatched" (on
    one side only; ``name_a`` or ``name_b`` empty); ``label``: the segment's."""

    kind: str
    label: str
    name_a: str
    name_b: str

    @property
    def text(self) -> str:
        if self.kind == MATCHED:
            return f"{self.label} › {self.name_a}"
        if self.kind == FUSED:
            return f"{self.label} › {self.name_a} ≈ {self.name_b}"
        side, name = ("A", self.name_a) if self.name_a else ("B", self.name_b)
        return f"only in {side}: {self.label} › {name}"


@dataclass(frozen=True)
class MappingUse:
    """A name-map rule that changed op names ``raw`` -> ``mapped``: ``a_ops`` times in A's
    compared steps, ``b_ops`` in B's (one entry for both sides)."""

    rule: str
    raw: str
    mapped: str
    a_ops: int
    b_ops: int

    @property
    def side(self) -> str:
        """ "A", "B", or "both"."""
        return "both" if self.a_ops and self.b_ops else ("A" if self.a_ops else "B")

    @property
    def ops(self) -> int:
        return self.a_ops + self.b_ops


@dataclass(frozen=True)
class Alignment:
    """``key_a[i]``: index into ``keys`` of A's op i (-1: outside the compared steps); the
    same for B. ``segments``: segment pairs matched; ``by_occurrence``: those too large for
    sequence matching (matched by occurrence); ``largest``: the largest pair's units."""

    steps: StepPairs
    a: OpTable
    b: OpTable
    key_a: np.ndarray
    key_b: np.ndarray
    keys: tuple[AlignKey, ...]
    mappings: tuple[MappingUse, ...]
    segments: int
    by_occurrence: int
    largest: tuple[int, int]


def align(
    ctx_a: AnalysisContext,
    ctx_b: AnalysisContext,
    steps: StepChoice | str = "auto",
    names: NameMap | None = None,
) -> Alignment:
    choice = StepChoice.parse(steps) if isinstance(steps, str) else steps
    names = names or NameMap.load()
    pairs = pair_steps(ctx_a.steps, ctx_b.steps, choice)
    ops_a, ops_b = op_table(ctx_a, names), op_table(ctx_b, names)
    vocab: dict[str, int] = {}
    side_a, side_b = _Side.of(ops_a, pairs.a, vocab), _Side.of(ops_b, pairs.b, vocab)
    pieces: list[np.ndarray] = []
    segments = by_occurrence = 0
    budget = CELL_BUDGET
    largest = (0, 0)
    for seg in sorted(set(side_a.segments) | set(side_b.segments)):
        ra, rb = side_a.segments.get(seg, (0, 0)), side_b.segments.get(seg, (0, 0))
        na, nb = ra[1] - ra[0], rb[1] - rb[0]
        if na and nb:
            segments += 1
            largest = max(largest, (na, nb), key=lambda x: x[0] * x[1])
        sequence = na * nb <= min(MAX_CELLS, budget)
        budget -= na * nb if sequence else 0
        by_occurrence += bool(na and nb and not sequence)
        codes = _opcodes(side_a.unit_name[ra[0] : ra[1]], side_b.unit_name[rb[0] : rb[1]], sequence)
        at = codes + np.array([0, ra[0], ra[0], rb[0], rb[0]])  # to units of the whole side
        pieces.append(np.column_stack((at, np.full(len(codes), seg[1]))))
    opcodes = np.concatenate(pieces) if pieces else np.zeros((0, 6), np.int64)
    keys, unit_a, unit_b = _keys(opcodes, side_a.unit_name, side_b.unit_name, list(vocab))
    return Alignment(
        steps=pairs,
        a=ops_a,
        b=ops_b,
        key_a=side_a.op_keys(unit_a, len(ops_a)),
        key_b=side_b.op_keys(unit_b, len(ops_b)),
        keys=keys,
        mappings=_both_sides(_mappings(ops_a, side_a.ops), _mappings(ops_b, side_b.ops)),
        segments=segments,
        by_occurrence=by_occurrence,
        largest=largest,
    )


# opcodes: rows (tag, i1, i2, j1, j2[, label]) as difflib's, the tag coded
EQUAL, REPLACE, DELETE, INSERT = range(4)
_TAGS = {"equal": EQUAL, "replace": REPLACE, "delete": DELETE, "insert": INSERT}
_KIND_CODES = (MATCHED, FUSED, UNMATCHED)


def _keys(
    opcodes: np.ndarray, names_a: np.ndarray, names_b: np.ndarray, words: list[str]
) -> tuple[tuple[AlignKey, ...], np.ndarray, np.ndarray]:
    """The alignment keys of all segments' opcodes, numbered in the order they first occur, and
    each unit's key: an equal block gives one key per unit pair (the name, matched), a replaced
    stretch one for the whole (fused), a deleted or inserted unit one of its own (unmatched).
    One pass of array operations over every unit; Python only per fused group and per key."""
    tag, i1, i2, j1, j2, label = (opcodes[:, c] for c in range(6))
    count = np.where(tag == REPLACE, 1, np.where(tag == INSERT, j2 - j1, i2 - i1))
    op = np.repeat(np.arange(len(opcodes)), count)  # one event per key occurrence
    offset = np.arange(len(op)) - np.repeat(np.cumsum(count) - count, count)
    t, unit_i, unit_j = tag[op], i1[op] + offset, j1[op] + offset
    kind = np.select([t == EQUAL, t == REPLACE], [0, 1], 2)
    name_a, name_b = np.full(len(op), -1), np.full(len(op), -1)
    on_a, on_b = (t == EQUAL) | (t == DELETE), t == INSERT
    name_a[on_a] = names_a[unit_i[on_a]]
    name_b[on_b] = names_b[unit_j[on_b]]
    replaced = np.flatnonzero(tag == REPLACE)
    fused: dict[tuple[str, str], int] = {}  # a fused event's name_a: its (A, B) text pair's id
    name_a[t == REPLACE] = [
        fused.setdefault(
            (_listed(words, names_a[i1[r] : i2[r]]), _listed(words, names_b[j1[r] : j2[r]])),
            len(fused),
        )
        for r in replaced.tolist()
    ]
    group, first = first_occurrence(kind, label[op], name_a, name_b)
    fused_text = list(fused)
    keys = []
    for e in first.tolist():
        k, lab, x, y = _KIND_CODES[kind[e]], words[label[op[e]]], int(name_a[e]), int(name_b[e])
        if k == FUSED:
            keys.append(AlignKey(k, lab, *fused_text[x]))
        else:
            keys.append(AlignKey(k, lab, words[x] if x >= 0 else "", words[y] if y >= 0 else ""))
    unit_a, unit_b = np.full(len(names_a), -1, np.int64), np.full(len(names_b), -1, np.int64)
    unit_a[unit_i[on_a]] = group[on_a]
    unit_b[unit_j[t == EQUAL]] = group[t == EQUAL]
    unit_b[unit_j[on_b]] = group[on_b]
    fused_key = group[t == REPLACE]  # one event per replaced stretch, in opcode order
    unit_a[_ranges(i1[replaced], i2[replaced])] = np.repeat(fused_key, (i2 - i1)[replaced])
    unit_b[_ranges(j1[replaced], j2[replaced])] = np.repeat(fused_key, (j2 - j1)[replaced])
    return tuple(keys), unit_a, unit_b


def first_occurrence(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the columns, its distinct value's number, distinct values numbered in the
    order they first occur; and each number's first row."""
    order = np.lexsort(columns[::-1])  # stable: equal rows keep their order
    new = np.zeros(len(order), bool)
    new[:1] = True
    for col in columns:
        x = col[order]
        new[1:] |= x[1:] != x[:-1]
    first = order[new]  # each distinct value's first row (the sort is stable)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    group = np.empty(len(order), np.int64)
    group[order] = rank[np.cumsum(new) - 1]
    return group, np.sort(first)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(s, e)`` for each pair."""
    lengths = ends - starts
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())


def _listed(words: list[str], ids: np.ndarray) -> str:
    """A fused group's names on one side: distinct, in order, the first few."""
    seen = list(dict.fromkeys(words[i] for i in ids.tolist()))
    more = f" (+{len(seen) - FUSED_NAMES})" if len(seen) > FUSED_NAMES else ""
    return " + ".join(seen[:FUSED_NAMES]) + more


@dataclass(frozen=True)
class _Side:
    """One side's ops in the compared steps, sorted by (step pair, label, start) and cut into
    units (runs of one name in one segment). ``ops``: op indices in that order; ``unit_of``:
    each of them's unit; ``unit_name``: each unit's name (vocab id); ``segments``: (pair,
    label id) -> the segment's units [first, last)."""

    ops: np.ndarray
    unit_of: np.ndarray
    unit_name: np.ndarray
    segments: dict[tuple[int, int], tuple[int, int]]

    @classmethod
    def of(cls, table: OpTable, steps: np.ndarray, vocab: dict[str, int]) -> _Side:
        pair_of_step = np.full(
            max(int(table.step.max(initial=-1)), int(steps.max(initial=-1))) + 2, -1
        )
        pair_of_step[steps] = np.arange(len(steps))
        pair = pair_of_step[table.step]  # (step -1 reads the last entry: -1)
        ops = np.flatnonzero(pair >= 0)
        label = _vocab_ids(table.label[ops], table.labels, vocab)
        name = _vocab_ids(table.name[ops], table.names, vocab)
        order = np.lexsort((table.start[ops], label, pair[ops]))
        ops, label, name, pair = ops[order], label[order], name[order], pair[ops][order]
        new_segment = np.ones(len(ops), dtype=bool)  # empty when the steps hold no op
        new_segment[1:] = (pair[1:] != pair[:-1]) | (label[1:] != label[:-1])
        new_unit = new_segment.copy()
        new_unit[1:] |= name[1:] != name[:-1]
        unit_of = np.cumsum(new_unit) - 1
        firsts = np.flatnonzero(new_unit)
        seg_units = np.flatnonzero(new_segment[firsts])  # first unit of each segment
        bounds = np.r_[seg_units, len(firsts)]
        segments = {
            (int(pair[firsts[u]]), int(label[firsts[u]])): (int(u), int(v))
            for u, v in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        }
        return cls(ops=ops, unit_of=unit_of, unit_name=name[firsts], segments=segments)

    def op_keys(self, unit_key: np.ndarray, n: int) -> np.ndarray:
        out = np.full(n, -1, np.int64)
        out[self.ops] = unit_key[self.unit_of]
        return out


def _vocab_ids(ids: np.ndarray, texts: tuple[str, ...], vocab: dict[str, int]) -> np.ndarray:
    """``ids`` (into ``texts``) as ids of the shared ``vocab``, new texts added in the order
    they first occur (the vocab's order decides which segments are matched first)."""
    distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    for i in distinct[np.argsort(first)].tolist():
        vocab.setdefault(texts[i], len(vocab))
    return np.array([vocab[texts[i]] for i in distinct.tolist()], np.int64)[inverse.reshape(-1)]


def _opcodes(a: np.ndarray, b: np.ndarray, sequence: bool) -> np.ndarray:
    """difflib's opcodes for two unit sequences, as rows (tag, i1, i2, j1, j2) of ints; an
    occurrence match instead when not ``sequence`` (too many unit pairs)."""
    if len(a) == 0 or len(b) == 0:
        rows = [(DELETE, 0, len(a), 0, 0)] * bool(len(a)) + [(INSERT, 0, 0, 0, len(b))] * bool(
            len(b)
        )
        return np.array(rows, np.int64).reshape(-1, 5)
    if sequence:
        matcher = SequenceMatcher(None, a.tolist(), b.tolist(), autojunk=False)
        rows = [(_TAGS[t], i1, i2, j1, j2) for t, i1, i2, j1, j2 in matcher.get_opcodes()]
        return np.array(rows, np.int64).reshape(-1, 5)
    return _by_occurrence(a, b)


def _by_occurrence(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The k-th unit of each name in A matched with the k-th in B (a sort and a search), as
    single-unit opcodes in A's order, then B's units left unmatched."""
    span = max(len(a), len(b)) + 1
    code_a, code_b = a * span + _occurrence(a), b * span + _occurrence(b)  # (name, k): unique
    order = np.argsort(code_b)
    pos = np.minimum(np.searchsorted(code_b[order], code_a), len(b) - 1)
    hit = code_b[order][pos] == code_a
    j = np.where(hit, order[pos], 0)
    i = np.arange(len(a))
    found = np.column_stack((np.where(hit, EQUAL, DELETE), i, i + 1, j, np.where(hit, j + 1, 0)))
    hit_b = np.zeros(len(b), bool)
    hit_b[j[hit]] = True
    rest = np.flatnonzero(~hit_b)
    zero = np.zeros(len(rest), np.int64)
    left = np.column_stack((np.full(len(rest), INSERT), zero, zero, rest, rest + 1))
    return np.concatenate((found, left)).astype(np.int64)


def _occurrence(x: np.ndarray) -> np.ndarray:
    """Each entry's count of earlier equal entries."""
    order = np.argsort(x, kind="stable")
    first = np.r_[True, x[order][1:] != x[order][:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(x)), 0))
    out = np.empty(len(x), np.int64)
    out[order] = np.arange(len(x)) - run_start
    return out


Mapping = tuple[str, str, str]  # (rule, raw name, mapped name)


def _mappings(table: OpTable, ops: np.ndarray) -> dict[Mapping, int]:
    """The name-map rules that changed names of the compared ops, with how many each, in the
    order ``ops`` first uses them (per distinct raw name, not per op)."""
    raw, n = table.raw[ops], len(table.raw_names)
    count, first = _count_first(raw, n)
    fb_at = np.flatnonzero(table.fallback[ops])
    fb_count, fb_first = _count_first(raw[fb_at], n)
    found: list[tuple[tuple[int, int], Mapping, int]] = []
    for r in np.flatnonzero(count).tolist():
        raw_name, mapped = table.raw_names[r], table.names[table.name_of_raw[r]]
        rules = table.rules[r]
        found += [
            ((first[r], j), (rule, raw_name, mapped), count[r]) for j, rule in enumerate(rules)
        ]
        if fb_count[r] and raw_name == mapped:  # a fallback row inside an op of that name
            key = ("cpu_fallback", V.fallback_name(mapped), mapped)
            found.append(((fb_at[fb_first[r]], len(rules)), key, fb_count[r]))
    merged: dict[Mapping, int] = {}
    for _, key, ops_count in sorted(found, key=lambda f: f[0]):
        merged[key] = merged.get(key, 0) + int(ops_count)
    return merged


def _both_sides(a: dict[Mapping, int], b: dict[Mapping, int]) -> tuple[MappingUse, ...]:
    """One entry per mapping, A's first (in A's order), then those of B only."""
    return tuple(
        MappingUse(rule, raw, mapped, a.get(key, 0), b.get(key, 0))
        for key in dict.fromkeys([*a, *b])
        for rule, raw, mapped in (key,)
    )


def _count_first(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per code below ``n``: how often it occurs, and its first position (len: none)."""
    first = np.full(n, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return np.bincount(codes, minlength=n), first
