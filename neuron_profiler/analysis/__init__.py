"""Analyses: functions from a Trace to frozen dataclasses that renderers and exporters consume
(counters.py: device busy % and DMA bandwidth over time)."""
