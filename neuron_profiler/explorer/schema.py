"""What this project reads of Neuron Explorer's output: table names, the columns it uses and
which of them it needs (AWS's "Profile Parquet Schema Reference", schema 7.4.0 / Neuron 2.31;
docs/explorer.md has the prose and each ASSUMPTION).

A profile is a directory of Parquet files, one per table (``<Table>.parquet``); a large table
may be split across several files (ASSUMPTION: ``<Table>_<n>.parquet``, ``<Table>-<n>.parquet``
or a ``<Table>/`` directory of parts).
"""

from __future__ import annotations

# Tables
EVENTS = "SystemProfileEvents"  # runtime, hardware and framework events (one row each)
HBM_USAGE = "SystemProfileHbmUsage"  # device memory in use over time, by usage type
CC_OP = "CcOp"  # collective operations (device profile): sizes, algorithm, replica groups
DMA_PACKET = "DmaPacket"  # DMA packets inside the device (device profile)
SUMMARY = "Summary"  # whole-profile metrics (device profile)
TABLES = (EVENTS, HBM_USAGE, CC_OP, DMA_PACKET, SUMMARY)
PARQUET_SUFFIX = ".parquet"

# SystemProfileEvents columns
E_ID = "id"
E_NAME = "name"  # the runtime's event type (nrt_execute, nc_exec_running, ...) or framework op
E_START = "start_ts"  # ns
E_END = "end_ts"  # ns
E_DURATION = "duration_ns"
E_SOURCE = "trace_event_source"  # one of SOURCES
E_INSTANCE = "instance_id"
E_PROCESS = "process_id"
E_THREAD = "thread_id"
E_NC = "nc_idx"  # logical NeuronCore, process-local (absent on events of no core)
E_PCORE = "pcore_idx"
E_WORKER = "worker_gid"  # a NeuronCore worker, unique over the whole workload
E_FLOW = "flow_id"  # list of string-encoded integers
E_STREAM = "framework_stream_id"  # string
E_EXTRA = "extra_attributes_json"  # string: the event's other attributes
EVENT_REQUIRED = (E_NAME, E_START, E_END, E_SOURCE, E_PROCESS, E_THREAD)
EVENT_OPTIONAL = (E_INSTANCE, E_NC, E_PCORE, E_WORKER, E_FLOW, E_STREAM, E_EXTRA)

# trace_event_source values
SOURCE_RUNTIME, SOURCE_HARDWARE, SOURCE_FRAMEWORK = "neuron_rt", "neuron_hw", "framework"
SOURCES = (SOURCE_RUNTIME, SOURCE_HARDWARE, SOURCE_FRAMEWORK)

# Keys of extra_attributes_json that the reader uses (ASSUMPTION: the runtime event's data keys,
# as libnrt's system trace names them, docs/runtime-events.md)
X_EXEC_ID = "exec_id"
X_SEQ_IDS = ("nrta_seq_id", "nrt_sequence_id")  # the async API's sequence id, either spelling
X_OP_ID = "op_id"  # cc_running: the collective's id (joins CcOp.op_id)

# SystemProfileHbmUsage columns: every integer column ending in HBM_CATEGORY_SUFFIX other than
# the total is one usage category (the schema adds categories between releases)
H_TIMESTAMP = "timestamp"
H_TOTAL = "total_bytes"
H_DEVICE = "device_idx"
H_HBM = "hbm_idx"
H_INSTANCE = "instance_id"
HBM_REQUIRED = (H_TIMESTAMP, H_TOTAL, H_DEVICE)
HBM_CATEGORY_SUFFIX = "_bytes"

# CcOp columns
C_OP_ID = "op_id"
C_OPERATION = "operation"
C_ALGORITHM = "algorithm"
C_INPUT = "input_size"
C_OUTPUT = "output_size"
C_START = "start_ts"
CC_REQUIRED = (C_OP_ID, C_OPERATION)

# DmaPacket columns
D_TRANSFER = "transfer_bytes"
D_QUEUE_TYPE = "queue_type"
DMA_REQUIRED = (D_TRANSFER,)

# Legacy JSON export (``--output-format json``: system_profile.json): one object per event
LEGACY_FILE = "system_profile.json"
LEGACY_FRAMEWORK_TYPE = 99999  # its "type" of framework events (11: runtime)
