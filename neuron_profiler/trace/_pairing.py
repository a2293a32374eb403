"""Pair Chrome ``B``/``E`` events into complete events, as a viewer would nest them.

Per (pid, tid), in time order (file order breaks ties), each ``E`` closes the latest open ``B``.
A pair becomes one COMPLETE row (the ``B`` row, dur = E.ts - B.ts; the ``E``'s args are used when
the ``B`` has none); the ``E`` row is dropped because it is now part of that row. Unmatched ``B``
or ``E`` rows stay as BEGIN / END. Only B/E rows are visited (Kineto itself writes ``X``).

    columns = pair_begin_end(columns)
"""

from __future__ import annotations

import numpy as np

from neuron_profiler.trace import schema as S


def pair_begin_end(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ph = cols[S.PH]
    begins = np.flatnonzero(ph == S.Phase.BEGIN)
    ends = np.flatnonzero(ph == S.Phase.END)
    if not len(begins) or not len(ends):
        return cols
    rows = np.concatenate([begins, ends])
    rows = rows[np.lexsort((rows, cols[S.TS_NS][rows], cols[S.TID][rows], cols[S.PID][rows]))]
    open_rows: dict[tuple[int, int], list[int]] = {}
    b_rows: list[int] = []
    e_rows: list[int] = []
    is_begin = (ph[rows] == S.Phase.BEGIN).tolist()
    for row, pid, tid, begin in zip(
        rows.tolist(), cols[S.PID][rows].tolist(), cols[S.TID][rows].tolist(), is_begin, strict=True
    ):
        stack = open_rows.setdefault((pid, tid), [])
        if begin:
            stack.append(row)
        elif stack:
            b_rows.append(stack.pop())
            e_rows.append(row)
    if not b_rows:
        return cols
    b, e = np.array(b_rows), np.array(e_rows)
    cols = {k: v.copy() for k, v in cols.items()}
    cols[S.DUR_NS][b] = cols[S.TS_NS][e] - cols[S.TS_NS][b]
    cols[S.PH][b] = S.Phase.COMPLETE
    use_end_args = cols[S.ARGS_ROW][b] < 0
    for name in (S.ARGS_ROW, S.EXTERNAL_ID, S.CORRELATION):
        column = cols[name]
        column[b] = np.where(use_end_args, column[e], column[b])
    keep = np.ones(len(ph), dtype=bool)
    keep[e] = False
    return {k: v[keep] for k, v in cols.items()}
