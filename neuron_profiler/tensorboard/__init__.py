"""TensorBoard plugin ("Neuron Profiler" tab): serves what ``neuron_profiler.analysis`` computes
for the torch.profiler traces under a logdir; it computes nothing itself. ``discovery`` finds
the traces (no tensorboard import); ``plugin`` holds the TBPlugin and its routes."""
