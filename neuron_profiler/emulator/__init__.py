"""The emulated Neuron device (see docs/runtime-events.md). chips/timing are torch-free."""
