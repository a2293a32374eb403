"""Neuron Explorer's system profiles (Parquet, and its legacy JSON) and AWS's native PyTorch
profiling output, read into the runtime activities the libnrt path produces, so the one
placement (``runtime_trace.placement``) lays them out (docs/explorer.md).

Importing this package never imports pyarrow: only reading Parquet does (``_arrow``), and
without it that is one line saying what to install.
"""
