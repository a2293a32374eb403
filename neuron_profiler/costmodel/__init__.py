"""The cost model: chip profiles (``chips``), per-op flops and bytes (``ops``) and the roofline
and ring formulas (``roofline``). One torch-free module shared by the emulated device (which
times the ops it runs with it), the projection (``neuron-prof project``) and the analyzer."""
