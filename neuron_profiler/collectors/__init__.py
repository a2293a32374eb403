"""Kineto collector and runtime sources (planned; see docs/ARCHITECTURE.md)."""
