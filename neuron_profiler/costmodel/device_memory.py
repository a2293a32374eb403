"""Device memory the Neuron runtime holds outside the framework's tensors, per logical NeuronCore:
the emulator's model (every figure here is modelled, none measured; docs/emulator.md "Runtime
memory" lists them with their sources).

    reserved = runtime_memory(chip("trn2"))     # {"model_code": ..., "scratchpad": ..., ...}

AWS's "Neuron device memory" page (Neuron runtime documentation, "Explore" section) names the
runtime's categories: tensors, model constants, model code (including a fixed micro-code overhead
per physical NeuronCore), profile buffers, scratchpad, DMA rings and collectives. It gives one
figure, the micro-code overhead; the others depend on the compiled model and the runtime's
configuration and have no published default, so they are this project's ASSUMPTIONs.
"""

from __future__ import annotations

from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.trace import vocabulary as V

MIB = 1 << 20

# Model code: the micro-code overhead AWS gives per physical NeuronCore ("96MB", read as MiB:
# ASSUMPTION on the unit). The eager kernels' own instructions are taken as negligible beside it
# (ASSUMPTION).
MICROCODE_BYTES_PER_PHYSICAL_CORE = 96 * MIB
# Weights loaded with a compiled model (model constants): none. On the emulated device parameters
# are device tensors (eager ops and compiled graphs take them as inputs), so the allocator counts
# them under tensors (ASSUMPTION: as TorchNeuron's eager mode holds them).
WEIGHTS_BYTES_PER_CORE = 0
# Scratchpad for intermediate results of a compiled program (ASSUMPTION: 256 MiB per logical core;
# AWS calls it often the largest adjustable category and publishes no default).
SCRATCHPAD_BYTES_PER_CORE = 256 * MIB
# DMA rings: the descriptors of a program's data movements (ASSUMPTION: 64 MiB per logical core).
DMA_RING_BYTES_PER_CORE = 64 * MIB
# Collectives: buffers that orchestrate collective communication (ASSUMPTION: 128 MiB per
# logical core, reserved whether or not the program runs collectives).
COLLECTIVE_BYTES_PER_CORE = 128 * MIB
# Profile buffers: device-side buffers for profiling events, held while a profile runs, which is
# whenever these counters are sampled (ASSUMPTION: 64 MiB per logical core).
PROFILER_BYTES_PER_CORE = 64 * MIB

# The categories besides tensors, in the order the counters list them.
RUNTIME_CATEGORIES = (
    V.HBM_WEIGHTS,
    V.HBM_MODEL_CODE,
    V.HBM_SCRATCHPAD,
    V.HBM_DMA_RINGS,
    V.HBM_COLLECTIVES,
    V.HBM_PROFILER,
)


def runtime_memory(chip: ChipSpec) -> dict[str, int]:
    """Bytes per logical NeuronCore of ``chip`` in each category besides tensors (modelled).

    A logical core spans ``physical_cores // logical_cores`` physical ones, and carries their
    micro-code; the other figures are per logical core."""
    physical_per_logical = max(chip.physical_cores // max(chip.logical_cores, 1), 1)
    figures = {
        V.HBM_WEIGHTS: WEIGHTS_BYTES_PER_CORE,
        V.HBM_MODEL_CODE: MICROCODE_BYTES_PER_PHYSICAL_CORE * physical_per_logical,
        V.HBM_SCRATCHPAD: SCRATCHPAD_BYTES_PER_CORE,
        V.HBM_DMA_RINGS: DMA_RING_BYTES_PER_CORE,
        V.HBM_COLLECTIVES: COLLECTIVE_BYTES_PER_CORE,
        V.HBM_PROFILER: PROFILER_BYTES_PER_CORE,
    }
    return {c: figures[c] for c in RUNTIME_CATEGORIES}
