"""Which ``nn.Module`` each op ran in, from the module frames a trace records, for the diff's
rows by module (docs/diff.md#rows-by-module)::

    paths = op_modules(ctx, table)      # table: align.op_table's outermost ops
    paths.texts[paths.of_op[i]]         # "Net_0.Sequential_0.Block_0.Linear_0" (-1: none)

A **module frame** is a complete host row named ``nn.Module: <Class>_<k>``: what torch.profiler
writes, with ``with_stack=True`` and ``with_modules=True``, as a ``python_function`` row around
each module's ``forward`` call (torch numbers the instances of each class in the order it first
sees them: ``Linear_0``, ``Linear_1``; ``with_modules`` without ``with_stack`` writes none), what
2021 Kineto wrote as a ``cpu_op``, and a ``record_function`` of that name (a framework's own
module annotation). A frame's **path** is the names of the frames around it on its thread,
outermost first, joined by ``.``; an op's module is its innermost enclosing frame's path. torch
records class-instance names, not attribute names (``layers.0.fc``), so that is what a path
holds. Backward ops run outside any forward call, so they have no module.

Vectorised: one containment pass over the frames and ops (``_tree.parents``), paths numbered
level by level (a ``np.unique`` per nesting depth); Python only per distinct path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._tree import depths, innermost_marked, parents
from neuron_profiler.analysis.align import OpTable, thread_codes
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.vocabulary import MODULE_PREFIX

FRAME_KINDS = (S.EventKind.PYTHON, S.EventKind.CPU_OP, S.EventKind.USER_ANNOTATION)
SEPARATOR = "."


@dataclass(frozen=True)
class OpModules:
    """Per op of the table: ``of_op`` its module path (index into ``texts``, -1: outside any
    module frame); ``frames``: module frames the trace holds."""

    of_op: np.ndarray
    texts: tuple[str, ...]
    frames: int


def op_modules(ctx: AnalysisContext, table: OpTable) -> OpModules:
    return row_modules(ctx, table.tree.rows[table.node], table.start, table.end)


def row_modules(
    ctx: AnalysisContext, op_rows: np.ndarray, op_start: np.ndarray, op_end: np.ndarray
) -> OpModules:
    """Per host row (``op_rows``, spanning ``op_start``..``op_end``): its module path."""
    host, c, strings = ctx.host, ctx.trace.columns, ctx.trace.strings
    frame = np.flatnonzero(
        np.isin(host.name_id, ctx.names.modules)
        & np.isin(host.kind, np.array(FRAME_KINDS, np.uint8))
    )
    n = len(op_rows)
    if len(frame) == 0:
        return OpModules(np.full(n, -1, np.int64), (), 0)
    rows = np.r_[host.rows[frame], op_rows]
    start = np.r_[host.start[frame], op_start]
    end = np.r_[host.end[frame], op_end]
    marked = np.r_[np.ones(len(frame), bool), np.zeros(n, bool)]
    thread = thread_codes(c[S.PID][rows].astype(np.int64), c[S.TID][rows].astype(np.int64))
    order = np.lexsort((~marked, -end, start, thread))  # a frame before an op of its span
    parent = parents(thread[order], start[order], end[order])
    inner = innermost_marked(parent, marked[order])
    frame_parent = np.where(parent >= 0, inner[np.maximum(parent, 0)], -1)  # enclosing frame
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order))
    name = np.full(len(order), -1, np.int64)
    name[at[: len(frame)]] = host.name_id[frame]
    path, texts = _paths(frame_parent, name, marked[order], strings)
    op_at = at[len(frame) :]
    op_frame = np.where(parent[op_at] >= 0, inner[np.maximum(parent[op_at], 0)], -1)
    of_op = np.where(op_frame >= 0, path[np.maximum(op_frame, 0)], -1)
    return OpModules(of_op=of_op, texts=texts, frames=len(frame))


def _paths(
    frame_parent: np.ndarray, name: np.ndarray, marked: np.ndarray, strings: list[str]
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per frame its path id (others -1) and the path texts: frames numbered level by level
    (depth among frames), a path being (its parent frame's path, its name)."""
    frames = np.flatnonzero(marked)
    up = np.full(len(marked), -1, np.int64)
    up[frames] = frame_parent[frames]
    depth = depths(up)[frames]
    path = np.full(len(marked), -1, np.int64)
    texts: list[str] = []
    for d in np.unique(depth).tolist():
        level = frames[depth == d]
        above = np.where(up[level] >= 0, path[np.maximum(up[level], 0)], -1)
        pairs, inverse = np.unique(
            np.column_stack((above, name[level])), axis=0, return_inverse=True
        )
        path[level] = len(texts) + inverse.reshape(-1)
        for prefix, name_id in pairs.tolist():
            own = strings[name_id][len(MODULE_PREFIX) :]
            texts.append(f"{texts[prefix]}{SEPARATOR}{own}" if prefix >= 0 else own)
    return path, tuple(texts)


def top_modules(paths: OpModules, depth: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per op: its enclosing module at nesting ``depth`` (1: the outermost frame; an op less
    deep: its own path), as an index into the returned paths (-1: outside any frame). Python per
    distinct path."""
    cut = [SEPARATOR.join(t.split(SEPARATOR)[:depth]) for t in paths.texts]
    texts, inverse = np.unique(np.array(cut, dtype=object), return_inverse=True)
    code = np.r_[inverse.reshape(-1).astype(np.int64), -1]  # -1 (no module) stays -1
    return code[paths.of_op], tuple(str(t) for t in texts)
