"""The step-time breakdown of torch-tb-profiler 0.4.3 (the retired TensorBoard plugin's
Overview), with its rules and category names, so its users find the numbers they know::

    tb = tb_profiler_breakdown(trace)                 # today's category names understood
    tb.rows()                                         # [{"step": "5", "Kernel": µs, ...}, ...]
    tb_profiler_breakdown(trace, legacy=True)         # exactly as 0.4.3 reads the trace

Rules (docs/breakdown-definitions.md, torch-tb-profiler): steps are the ``ProfilerStep#N``
spans, stretched over the device work launched by runtime calls lying inside them (and made
contiguous), trailing steps without device work dropped, and a last step with under 80% of the
previous step's device events dropped. Each instant of the steps goes to the first role that
covers it: Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec > Other.

0.4.3 reads two things on current traces wrongly; ``legacy=False`` (the default) reads them
right, and these are the only differences between the two modes:
- runtime calls: it maps only the 2021 category ``Runtime``, not ``cuda_runtime`` /
  ``cuda_driver`` / ``privateuse1_runtime`` / ``mtia_runtime``, so Runtime reads 0 and steps are
  not stretched over the device work they launched;
- DataLoader spans recorded as ``user_annotation`` (current torch) are dropped, so DataLoader
  reads 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._keys import index_of
from neuron_profiler.analysis.selections import is_dataloader_name
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

ROLES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec")
OTHER = "Other"
COMM_OPS = frozenset(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)
LEGACY_RUNTIME = frozenset({"runtime"})
TAIL_RATIO = 0.8  # a last step with fewer device events than this share of the previous: cut
# event types, from cat.lower() as 0.4.3 maps them
_T_NONE, _T_OP, _T_PY, _T_ANNOT, _T_STEP, _T_RUNTIME, _T_KERNEL, _T_MEMCPY, _T_MEMSET = range(9)
_CAT_TYPES = {
    "cpu_op": _T_OP,
    "operator": _T_OP,
    "python": _T_PY,
    "kernel": _T_KERNEL,
    "memcpy": _T_MEMCPY,
    "gpu_memcpy": _T_MEMCPY,
    "memset": _T_MEMSET,
    "gpu_memset": _T_MEMSET,
    "user_annotation": _T_ANNOT,
    "gpu_user_annotation": _T_ANNOT,
}


@dataclass(frozen=True)
class TbStep:
    """One step: its label, its adjusted span and ns per category (``columns`` order)."""

    step: str
    start_ns: int
    end_ns: int
    values_ns: dict[str, int]

    @property
    def total_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class TbBreakdown:
    """Args: columns: the categories 0.4.3 shows for this trace (Kernel/Memcpy/Memset/Runtime
    only with device or runtime events, Communication only with comm ops); legacy: read as
    0.4.3 reads it."""

    steps: tuple[TbStep, ...]
    columns: tuple[str, ...]
    legacy: bool

    def rows(self) -> list[dict[str, float | str]]:
        """``[{"step": "5", "<category>": µs, ..., "Total": µs}]`` as in the Overview table."""
        return [
            {
                "step": s.step,
                **{c: s.values_ns[c] / 1e3 for c in self.columns},
                "Total": s.total_ns / 1e3,
            }
            for s in self.steps
        ]


def _types(trace: Trace, legacy: bool) -> np.ndarray:
    """0.4.3's event type per string id of the category (names refine it below)."""
    runtime = (
        LEGACY_RUNTIME
        if legacy
        else LEGACY_RUNTIME | {c for c, k in _kind_table().items() if k == S.EventKind.RUNTIME}
    )
    table = np.full(len(trace.strings), _T_NONE, dtype=np.int8)
    for i, s in enumerate(trace.strings):
        low = s.lower()
        table[i] = _T_RUNTIME if low in runtime else _CAT_TYPES.get(low, _T_NONE)
    return table


def _kind_table() -> dict[str, S.EventKind]:
    from neuron_profiler.trace.kinds import CATEGORY_KINDS

    return CATEGORY_KINDS


def tb_profiler_breakdown(trace: Trace, *, legacy: bool = False) -> TbBreakdown:
    c = trace.columns
    rows = np.flatnonzero(c[S.PH] == S.Phase.COMPLETE)
    name_id = c[S.NAME_ID][rows]
    flags = _name_flags(trace.strings, legacy)
    typ = _refine(_types(trace, legacy)[c[S.CAT_ID][rows]], flags[:, name_id])
    start = c[S.TS_NS][rows]
    end = start + c[S.DUR_NS][rows]
    roles = _role_ranges(typ, flags[:, name_id], start, end, c[S.EXTERNAL_ID][rows])
    steps_s, steps_e, labels, matched = _steps(
        typ, trace.strings, name_id, start, end, c[S.CORRELATION][rows]
    )
    steps_s, steps_e, labels = _trim(steps_s, steps_e, labels, matched)
    values = _assign(roles, steps_s, steps_e)
    columns = _columns(roles)
    steps = tuple(
        TbStep(
            step=labels[i],
            start_ns=int(steps_s[i]),
            end_ns=int(steps_e[i]),
            values_ns={k: int(values[k][i]) for k in columns},
        )
        for i in range(len(labels))
    )
    return TbBreakdown(steps=steps, columns=columns, legacy=legacy)


_STEP, _COMM, _LOADER, _KEPT_ANNOT = range(4)


def _name_flags(strings: list[str], legacy: bool) -> np.ndarray:
    """Per string id: is a ProfilerStep, a comm op, a DataLoader span, an annotation kept
    (0.4.3 keeps only steps and comm ops; today's reading also DataLoader spans)."""
    flags = np.zeros((4, len(strings)), dtype=bool)
    for i, n in enumerate(strings):
        flags[_STEP, i] = n.startswith(V.PROFILER_STEP_PREFIX)
        flags[_COMM, i] = n in COMM_OPS
        flags[_LOADER, i] = is_dataloader_name(n)
    flags[_KEPT_ANNOT] = flags[_COMM] | (flags[_LOADER] & (not legacy))
    return flags


def _refine(typ: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """ProfilerStep rows, and which annotations survive."""
    typ = np.where(flags[_STEP] & np.isin(typ, [_T_OP, _T_ANNOT]), _T_STEP, typ)
    typ[(typ == _T_ANNOT) & ~flags[_KEPT_ANNOT]] = _T_NONE
    return typ


def _role_ranges(
    typ: np.ndarray, flags: np.ndarray, start: np.ndarray, end: np.ndarray, ext: np.ndarray
) -> dict[str, I.Intervals]:
    hostish = np.isin(typ, [_T_OP, _T_PY, _T_ANNOT])
    comm_op = hostish & flags[_COMM]
    loader = np.isin(typ, [_T_OP, _T_ANNOT]) & flags[_LOADER]
    kernel = typ == _T_KERNEL
    comm_kernel = kernel & np.isin(ext, ext[comm_op])
    masks = {
        "Kernel": kernel & ~comm_kernel,
        "Memcpy": typ == _T_MEMCPY,
        "Memset": typ == _T_MEMSET,
        "Communication": comm_kernel | comm_op,
        "Runtime": typ == _T_RUNTIME,
        "DataLoader": loader,
        "CPU Exec": hostish & ~comm_op & ~loader,
    }
    return {k: I.union(start[m], end[m]) for k, m in masks.items()}


def _steps(
    typ: np.ndarray,
    strings: list[str],
    name_id: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    corr: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Host steps adjusted to the device work their runtime calls launched (0.4.3's
    _find_device_steps / _update_steps_duration); also each step's matched device events."""
    is_step = typ == _T_STEP
    if is_step.any():
        s, e = start[is_step].copy(), end[is_step].copy()
        labels = [strings[n].split("#")[1] for n in name_id[is_step].tolist()]
    else:  # one step "0" over the host ops (then adjusted like any step)
        host = np.isin(typ, [_T_OP, _T_PY])
        lo, hi = (start[host].min(), end[host].max()) if host.any() else (0, 0)
        s, e, labels = np.array([lo]), np.array([hi]), ["0"]
    device = np.isin(typ, [_T_KERNEL, _T_MEMCPY, _T_MEMSET])
    step_of_dev = _device_step(typ, start, end, corr, device, s, e)
    matched = np.bincount(step_of_dev[step_of_dev >= 0], minlength=len(s))
    if matched.sum() == 0:
        return s, e, labels, matched
    dev_s, dev_e = start[device], end[device]
    mine = step_of_dev >= 0
    d_min = np.full(len(s), np.iinfo(np.int64).max)
    d_max = np.full(len(s), np.iinfo(np.int64).min)
    np.minimum.at(d_min, step_of_dev[mine], dev_s[mine])
    np.maximum.at(d_max, step_of_dev[mine], dev_e[mine])
    prev = int(s[0])
    if matched[0] > 0:
        early = dev_e[~mine] < d_min[0]
        if early.any():
            prev = max(prev, int(dev_e[~mine][early].max()))
    for i in range(len(s)):  # a running boundary: each step starts where the previous ended
        s[i] = max(prev, s[i])
        e[i] = max(e[i], d_max[i]) if matched[i] else max(e[i], s[i])
        e[i] = max(e[i], s[i])
        prev = int(e[i])
    return s, e, labels, matched


def _device_step(
    typ: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    corr: np.ndarray,
    device: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
) -> np.ndarray:
    """Per device event, the step whose host span wholly holds the runtime call sharing its
    correlation id (-1 when none does)."""
    rt = np.flatnonzero((typ == _T_RUNTIME) & (corr != -1))
    out = np.full(int(device.sum()), -1, np.int64)
    if len(rt) == 0:
        return out
    rt = rt[np.argsort(start[rt], kind="stable")]
    if len(s) > 1 and bool((s[1:] < e[:-1]).any()):  # overlapping steps: 0.4.3's own walk
        rt_step = _walk(start[rt], end[rt], s, e)
    else:
        k = np.searchsorted(s, start[rt], side="right") - 1
        rt_step = np.where((k >= 0) & (end[rt] <= e[np.maximum(k, 0)]), k, -1)
    order = np.argsort(corr[rt], kind="stable")  # the first call with an id wins
    keys, first = np.unique(corr[rt][order], return_index=True)
    j = index_of(keys, corr[device])
    hit = j >= 0
    out[hit] = rt_step[order[first[j[hit]]]]
    return out


def _walk(rs: np.ndarray, re_: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """0.4.3's two-pointer walk of calls (by start) against steps (in order): a call counts for
    the current step when it lies wholly inside it. Only for steps that overlap each other,
    where it differs from a lookup by start.

    The walk leaves step i at the first call (from where it entered) that starts at or after
    both the step's start and end and ends after the step's end; the calls before that one are
    the step's to take or skip. So it runs a step at a time, each a few vector operations."""
    out = np.full(len(rs), -1, np.int64)
    j, n = 0, len(rs)
    for i in range(len(s)):
        if j >= n:
            break
        first = max(j, int(np.searchsorted(rs, max(s[i], e[i]), side="left")))
        leave = _first_above(re_, first, e[i])
        held = slice(j, leave)
        out[held][(rs[held] >= s[i]) & (re_[held] <= e[i])] = i
        j = leave
    return out


def _first_above(x: np.ndarray, start: int, bound: int) -> int:
    """Index of the first x[k] > bound with k >= start (len(x) if none), in growing chunks."""
    size = 64
    while start < len(x):
        hit = np.flatnonzero(x[start : start + size] > bound)
        if len(hit):
            return start + int(hit[0])
        start, size = start + size, size * 2
    return len(x)


def _trim(
    s: np.ndarray, e: np.ndarray, labels: list[str], matched: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Drop trailing steps without device events, then a last step with under 80% of the
    previous step's (only when some step has device work and there are several)."""
    if matched.sum() == 0 or len(s) <= 1:
        return s, e, labels
    last = int(np.flatnonzero(matched > 0)[-1])
    keep = last + 1
    if last > 0 and matched[last - 1] * TAIL_RATIO > matched[last]:
        keep = last
    return s[:keep], e[:keep], labels[:keep]


def _assign(roles: dict[str, I.Intervals], s: np.ndarray, e: np.ndarray) -> dict[str, np.ndarray]:
    """Each role takes what the roles before it left of the steps (0.4.3's quirk included: when
    nothing is left, the next role is taken whole and the steps are free again)."""
    all_steps = I.union(s, e)
    free: I.Intervals | None = None
    out: dict[str, np.ndarray] = {}
    for role in ROLES:
        ranges = roles[role]
        if free is not None and len(free):
            take = I.intersect(free, ranges)
        else:
            take, free = ranges, all_steps
        free = I.subtract(free, take)
        out[role] = I.overlap_per_window(take, s, e)
    out[OTHER] = I.overlap_per_window(free if free is not None else all_steps, s, e)
    return out


def _columns(roles: dict[str, I.Intervals]) -> tuple[str, ...]:
    gpu = any(len(roles[k]) for k in ("Kernel", "Memcpy", "Memset", "Runtime"))
    cols = (
        ("Kernel", "Memcpy", "Memset") * gpu
        + ("Communication",) * bool(len(roles["Communication"]))
        + ("Runtime",) * gpu
    )
    return cols + ("DataLoader", "CPU Exec", OTHER)
