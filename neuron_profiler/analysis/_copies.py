"""Direction and size of every copy among the device work::

    copies = copy_info(trace, work)
    copies.direction[i] == D2H, copies.nbytes[i]       # one entry per device row (work order)

Direction: the row's ``direction`` arg (ours), else CUDA's copy name (``Memcpy DtoH (...)``,
``Memcpy HtoD (...)``); other copies and non-copies are NONE. Size: the ``bytes`` arg (or
``Bytes``), 0 when absent or not a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._args import arg_values, first_number
from neuron_profiler.analysis._device import DMA, DeviceWork
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

NONE, D2H, H2D = 0, 1, 2
_CODES = {V.DIR_D2H: D2H, V.DIR_H2D: H2D}


@dataclass(frozen=True)
class CopyInfo:
    direction: np.ndarray  # uint8 per work row: NONE, D2H or H2D
    nbytes: np.ndarray  # int64 per work row


def copy_info(trace: Trace, work: DeviceWork) -> CopyInfo:
    direction = np.zeros(len(work), np.uint8)
    nbytes = np.zeros(len(work), np.int64)
    at = np.flatnonzero(work.queue == DMA)
    if len(at) == 0:
        return CopyInfo(direction, nbytes)
    rows = work.rows[at]
    a = arg_values(trace, rows, (V.ARG_DIRECTION, *V.ARG_BYTES_KEYS))
    by_name: dict[int, int] = {}
    name_ids = trace.col(S.NAME_ID)
    for j, (value, row) in enumerate(zip(a[V.ARG_DIRECTION].tolist(), rows.tolist(), strict=True)):
        code = _CODES.get(value) if isinstance(value, str) else None
        if code is None:
            name_id = int(name_ids[row])
            code = by_name.get(name_id)
            if code is None:
                code = by_name[name_id] = _from_name(trace.strings[name_id])
        direction[at[j]] = code
    sizes = first_number(a, V.ARG_BYTES_KEYS)
    nbytes[at] = np.clip(np.nan_to_num(sizes, posinf=0), 0, 2**62).astype(np.int64)
    return CopyInfo(direction, nbytes)


def _from_name(name: str) -> int:
    return D2H if "DtoH" in name else H2D if "HtoD" in name else NONE
