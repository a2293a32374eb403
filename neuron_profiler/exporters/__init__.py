"""Trace writers: Chrome JSON (chrome.py), Perfetto protobuf (planned)."""
