"""Analyses: functions from a Trace to frozen dataclasses (planned)."""
