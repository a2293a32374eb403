"""The one record layout: a placed trace row, as ``placement`` produces it, the offline merge reads
it and the C++ bridge converts it into a Kineto activity::

    rows = np.zeros(n, dtype=RECORD)        # placement fills them; the empty result is n = 0
    rows["start_ns"], rows["pid"], names[rows["name_id"][i]], args[rows["args_id"][i]]

``RECORD`` is a numpy structured dtype with C alignment; ``struct Record`` in
``collectors/_kineto/neuron_kineto.h`` has the same fields, offsets and size (asserted there at
compile time, and checked against this dtype when the bridge loads), so the bridge takes the
rows with one copy of the array's buffer.
"""

from __future__ import annotations

import numpy as np

from neuron_profiler.trace import vocabulary as V

# libkineto::ActivityType values (ActivityType.h): kernels and DMA count as device time.
KINETO_MEMCPY, KINETO_KERNEL, KINETO_RUNTIME, KINETO_DRIVER, KINETO_OVERHEAD = 3, 5, 24, 25, 11
KINETO_GPU_USER_ANNOTATION = 2
# MTIA_COUNTERS: an activity type Kineto's JSON writer renders as a counter ("C") event (its
# args: the activity's typed counter values). The collector's device memory counters use it.
KINETO_COUNTER = 17

# Trace category of each placed row (the ``category`` field indexes it), and the Kineto activity
# type the bridge gives it (Kineto names the category from the type).
CATEGORIES = (
    V.CAT_KERNEL,
    V.CAT_MEMCPY,
    V.CAT_RUNTIME,
    V.CAT_DRIVER,
    V.CAT_OVERHEAD,
    V.CAT_GRAPH_OP,
)
KINETO_TYPES = np.array(
    [
        KINETO_KERNEL,
        KINETO_MEMCPY,
        KINETO_RUNTIME,
        KINETO_DRIVER,
        KINETO_OVERHEAD,
        KINETO_GPU_USER_ANNOTATION,
    ],
    dtype=np.int32,
)

RECORD = np.dtype(
    [
        ("start_ns", np.int64),
        ("end_ns", np.int64),  # host clock
        ("pid", np.int64),
        ("tid", np.int64),  # where the row goes (Kineto: device, resource/thread)
        ("external_id", np.int64),  # the launching aten op's correlation id (0: none)
        # per-row numbers rendered as args (-1: absent); device/stream/correlation are CUDA's keys
        ("exec_id", np.int64),
        ("flops", np.int64),
        ("bytes", np.int64),
        ("device", np.int64),
        ("stream", np.int64),
        ("correlation", np.int64),
        ("flow_id", np.int64),  # ac2g flow id (0: none)
        ("activity", np.int64),  # index of the row's activity in the placed DeviceActivities
        ("name_id", np.int32),  # index into the names
        ("args_id", np.int32),  # index into the table of further args (-1: none)
        ("kineto_type", np.int32),  # KINETO_TYPES[category]
        ("kind", np.uint8),  # ActivityKind code
        ("category", np.uint8),  # index into CATEGORIES
        ("flow_start", np.bool_),  # the row starts its flow
        # derived from the above by ``with_rates`` (the one place): rendered as args beside
        # flops and bytes; the bridge only formats them
        ("tflops", np.float64),  # flops / duration, TFLOPS
        ("gbps", np.float64),  # bytes / duration, GB/s
    ],
    align=True,
)


def with_rates(records: np.ndarray) -> np.ndarray:
    """``records`` with their achieved rates set from flops, bytes and duration (a zero-length
    row counts as 1 ns): TFLOPS where ``flops`` is known (>= 0), GB/s where ``bytes`` is."""
    dur = np.maximum(records["end_ns"] - records["start_ns"], 1).astype(np.float64)
    records["tflops"] = np.where(records["flops"] >= 0, records["flops"] / dur / 1e3, 0.0)
    records["gbps"] = np.where(records["bytes"] >= 0, records["bytes"] / dur, 0.0)
    return records
