"""``torch.compile`` on the emulated device: each call of a compiled graph is one device execution.

    import neuron_profiler.emulator as emu
    emu.enable()
    fast = torch.compile(model)                    # Inductor's front end, our graph executor
    fast = torch.compile(model, backend="neuron")  # AOTAutograd + our graph executor
    fast = torch.compile(model, backend="eager")   # Dynamo only: one execution per op

What ``install()`` (called by ``enable``) sets up:

- Dynamo never traces the emulator's own code: the package is on Dynamo's skip list, so the
  dispatch path (``NeuronTensor.__torch_dispatch__`` -> ``dispatch.execute``) always runs as
  plain Python, never inside a frame Dynamo compiles.
- Dynamo treats a device tensor as what it stands for, a dense tensor on ``neuron:N``: graphs
  are traced with fake tensors on that device, like any backend's tensors (by default Dynamo
  would treat a wrapper subclass without ``__tensor_flatten__`` as an opaque object and trace
  nothing).
- ``backend="neuron"``: AOTAutograd (functionalised aten graphs, a forward and a backward graph)
  whose graphs run as ``NeuronGraph``: one runtime call and one ``nc_exec_running`` per call, its
  modelled time a roofline over the graph's ops with pointwise fusion (``fuse_groups``).
- The default backend (Inductor): for graphs on neuron tensors, Inductor's ``compile_fx`` runs
  with ``inner_compile`` = ``NeuronGraph`` (Inductor's decompositions, joint-graph passes and
  partitioner; no code generation: the device's compiler is not Inductor) and
  ``INDUCTOR_DEFAULTS`` (random ops draw as eager's do). Other graphs are untouched.
  ``mode="reduce-overhead"`` (CUDA graphs) is refused with ``EmulatorError``.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch.fx.node import map_arg

from neuron_profiler.emulator import dispatch as D
from neuron_profiler.emulator.costs import op_cost
from neuron_profiler.emulator.outputs import materialise, output_plan
from neuron_profiler.emulator.scheduler import GraphExecution, GraphOp
from neuron_profiler.emulator.tensor import NeuronTensor
from neuron_profiler.emulator.timing import engine_for
from neuron_profiler.errors import EmulatorError

BACKEND = "neuron"
REDUCE_OVERHEAD_REFUSED = (
    "torch.compile(mode='reduce-overhead') records CUDA graphs, which the emulated neuron "
    "device does not have; use the default mode (or mode='max-autotune-no-cudagraphs')"
)
# Inductor settings for neuron graphs, below the user's ``options=``. ``fallback_random``: random
# ops (dropout, rand) stay aten ops drawing from the host generator, as eager's do, instead of
# Inductor's own seeded RNG, whose draws differ from eager's for the same seed; Inductor
# generates no code here, so its RNG would gain nothing.
INDUCTOR_DEFAULTS: dict[str, Any] = {"fallback_random": True}
_graph_ids = itertools.count(1)
_installed = False
_OpOverload = torch._ops.OpOverload
_set_record_function = torch._C._autograd._enable_record_function


def _is_profiler_enabled() -> bool:
    return torch.autograd.profiler._is_profiler_enabled


class _OpRun(NamedTuple):
    """One aten op of a graph call, as run: what its device cost is computed from."""

    node: torch.fx.Node
    args: Any
    out: Any


class _GraphCost(NamedTuple):
    """A graph call's modelled device cost: totals, the dtype and engine class it is timed
    at, its duration and its ops' shares."""

    flops: int
    bytes_moved: int
    dtype: str
    matrix: bool
    duration_ns: int
    ops: tuple[GraphOp, ...]


# -- fusion --------------------------------------------------------------------------------
def _is_pointwise(node: torch.fx.Node) -> bool:
    t = node.target
    return (
        node.op == "call_function"
        and isinstance(t, _OpOverload)
        and torch.Tag.pointwise in t.tags
        and not t._schema.is_mutable
    )


def fuse_groups(graph: torch.fx.Graph) -> dict[torch.fx.Node, torch.fx.Node]:
    """Each pointwise node -> the last node of its fused chain: a maximal run of pointwise ops in
    which each intermediate has exactly one consumer (itself pointwise, in the chain). Such a
    chain reads its inputs once and writes its output once. Other nodes map to themselves."""
    root: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in reversed(graph.nodes):
        if node.op != "call_function":
            continue
        users = list(node.users)
        if _is_pointwise(node) and len(users) == 1 and _is_pointwise(users[0]) and users[0] in root:
            root[node] = root[users[0]]
        else:
            root[node] = node
    return root


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Integers proportional to ``weights`` that add up exactly to ``total``."""
    if not weights:
        return []
    s = float(sum(weights))
    if s <= 0:
        weights, s = [1.0] * len(weights), float(len(weights))
    raw = [total * w / s for w in weights]
    out = [int(r) for r in raw]
    rest = total - sum(out)
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[:rest]:
        out[i] += 1
    return out


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in _tensors(i)]
    return []


def _nbytes(x: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(x))


def _to_cpu_device(x: Any) -> Any:
    if isinstance(x, torch.device) and x.type == "neuron":
        return torch.device("cpu")
    return x


# -- the executor ----------------------------------------------------------------------------
class NeuronGraph:
    """One compiled graph on the emulated device (a NEFF on Trainium). Called (boxed) with the
    graph's inputs, it runs the graph's ops on the device memory (or, in timing mode, makes
    outputs of the right shape without computing them) and launches one device execution whose
    duration is the roofline of its fused groups plus one fixed kernel time."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str) -> None:
        # AOTAutograd calls a compiled graph with one list when it has ``_boxed_call``. Set on
        # the instance, not the class: the backward graph reaches AOTAutograd wrapped in
        # ``torch._dynamo.disable``, whose ``functools.wraps`` copies the instance's
        # ``__dict__`` only; a class attribute is lost there and AOTAutograd then warns
        # ("doesn't take boxed arguments") on every backward call.
        self._boxed_call = True
        self.graph_id = next(_graph_ids)
        self.kind = kind
        self.name = f"neuron_graph_{self.graph_id} ({kind})"
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.group = fuse_groups(gm.graph)
        # device arguments of factories inside the graph: the device memory is host memory
        for node in self.nodes:
            if node.op == "call_function":
                node.args = tuple(_to_cpu_device(a) for a in node.args)
                node.kwargs = {k: _to_cpu_device(v) for k, v in node.kwargs.items()}
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]

    def __call__(self, *call_args: Any) -> Any:
        """Boxed (one list, which is emptied) or plain positional inputs. The graph's buffers
        are device memory: while a profile records memory the CPU allocator does not report
        them as host memory (host reports off from the first op until the intermediates are
        dropped), and the outputs are then wrapped as device buffers, as an eager op's are."""
        launch_ns = time.time_ns()
        boxed = len(call_args) == 1 and type(call_args[0]) is list
        args = call_args[0] if boxed else list(call_args)
        core = None
        by_elem: dict[int, NeuronTensor] = {}
        env: dict[torch.fx.Node, Any] = {}
        for node, a in zip(self.placeholders, args, strict=False):
            if isinstance(a, NeuronTensor):
                if core is None:
                    core = a._core
                by_elem[id(a._elem)] = a
                a = a._elem
            env[node] = a
        args.clear()  # boxed convention: the caller hands its references over
        if core is None:
            core = D.STATE.current_core
        numerics = D.STATE.numerics
        tl = D.STATE.timeline
        quiet = _is_profiler_enabled() and D.ALLOCATOR.host_reports_off()
        _set_record_function(False)
        try:  # the intermediates die inside the quiet window, with _execute's frame
            result, cost, inputs = self._execute(env, numerics, tl)
        finally:
            _set_record_function(True)
            if quiet:
                D.ALLOCATOR.host_reports_on()
        outputs = [self._wrap(o, core, by_elem) for o in result]
        if tl is not None and cost is not None:
            kw = (
                dict(launch_ns=time.time_ns(), overhead_from_ns=launch_ns)
                if numerics
                else dict(launch_ns=launch_ns)
            )
            tl.kernel(
                core,
                self.name,
                flops=cost.flops,
                bytes_moved=cost.bytes_moved,
                dtype=cost.dtype,
                matrix=cost.matrix,
                not_before_ns=D.wait_pending(inputs),
                graph=GraphExecution(self.graph_id, cost.duration_ns, cost.ops),
                call_end_ns=time.time_ns(),  # in this frame: the row nests (with_stack)
                **kw,
            )
        return outputs

    def _execute(
        self, env: dict[torch.fx.Node, Any], numerics: bool, tl: Any
    ) -> tuple[Any, _GraphCost | None, list[torch.Tensor]]:
        """Run the graph's ops on ``env`` (its inputs, emptied here): the outputs, the modelled
        cost (with a timeline) and the inputs a collective may still be writing. Its own frame:
        every reference to an intermediate (``env``, the last op's arguments) dies on return,
        inside the caller's quiet window. An intermediate's host block is allocated while the
        CPU allocator does not report; freed after it reports again (a local of the calling
        frame), c10 logs it as a block "of unknown size allocated before the profiling"."""
        costs: list[_OpRun] = []
        result: Any = None
        for node in self.nodes:
            op = node.op
            if op == "call_function":
                fargs = map_arg(node.args, env.__getitem__)
                fkwargs = map_arg(node.kwargs, env.__getitem__)
                out = self._run(node.target, fargs, fkwargs, numerics)
                env[node] = out
                if isinstance(node.target, _OpOverload):
                    costs.append(_OpRun(node, fargs, out))
            elif op == "get_attr":
                v = getattr(self.gm, node.target)
                env[node] = v._elem if isinstance(v, NeuronTensor) else v
            elif op == "output":
                result = map_arg(node.args[0], env.__getitem__)
        cost = self._model(costs, env, tl) if tl is not None else None
        # what a collective may still be writing: the graph's inputs (its own buffers are new)
        inputs = [
            e for n, e in env.items() if n.op != "call_function" and isinstance(e, torch.Tensor)
        ]
        env.clear()
        return result, cost, inputs

    @staticmethod
    def _run(func: Any, args: Any, kwargs: Any, numerics: bool) -> Any:
        if not numerics and isinstance(func, _OpOverload):
            info = D._INFO.get(func) or D._describe(func)
            if info.kind is D.Kind.KERNEL or (info.kind is D.Kind.ALLOC and not info.mutated_names):
                inputs = [t for t in _tensors(list(args) + list(kwargs.values()))]
                plan = output_plan(func, args, kwargs, inputs)
                if plan is not None:
                    return materialise(plan, inputs)[0]
        return func(*args, **kwargs)

    @staticmethod
    def _wrap(o: Any, core: int, by_elem: dict[int, NeuronTensor]) -> Any:
        if isinstance(o, torch.Tensor):
            same = by_elem.get(id(o))
            return same if same is not None else D.new_device_tensor(o, core, True)
        if isinstance(o, (list, tuple)):
            return type(o)(NeuronGraph._wrap(i, core, by_elem) for i in o)
        return o

    def _model(self, costs: list[_OpRun], env: dict, tl: Any) -> _GraphCost:
        """Roofline per fused group; per op its share."""
        model = tl.model
        per_node: dict[torch.fx.Node, Any] = {}
        groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for run in costs:
            node, fargs = run.node, run.args
            info = D._INFO.get(node.target) or D._describe(node.target)
            if info.kind is not D.Kind.KERNEL:
                per_node[node] = None  # views, allocations: no device time
                continue
            inputs = _tensors(list(fargs) + list(map_arg(node.kwargs, env.__getitem__).values()))
            outs = _tensors(run.out)
            if not outs and info.mutated_names:
                outs = [t for t in inputs if t is not None][:1]
            per_node[node] = op_cost(info.name, inputs=inputs, outputs=outs, args=fargs)
            groups.setdefault(self.group[node], []).append(node)
        total_flops = total_bytes = 0
        weights: dict[torch.fx.Node, float] = {}
        node_bytes: dict[torch.fx.Node, int] = {}
        dtype, matrix = "float32", False
        for root, members in groups.items():
            if len(members) == 1:
                c = per_node[root]
                gbytes, gflops = c.bytes_moved, c.flops
                gmatrix, gdtype = c.matrix, c.dtype
            else:  # a fused chain: its external inputs once, its output once
                inside = set(members)
                seen: set[torch.fx.Node] = set()
                gbytes = _nbytes(env[root])
                for m in members:
                    for src in m.all_input_nodes:
                        if src not in inside and src not in seen:
                            seen.add(src)
                            gbytes += _nbytes(env[src])
                gflops = sum(per_node[m].flops for m in members)
                gmatrix, gdtype = False, per_node[root].dtype
            if gmatrix or not matrix:
                dtype = gdtype
            matrix = matrix or gmatrix
            ns = model.roofline_ns(flops=gflops, bytes_moved=gbytes, dtype=gdtype, matrix=gmatrix)
            fl = [per_node[m].flops for m in members]
            for m, share in zip(members, _apportion(ns, fl), strict=True):
                weights[m] = share
            node_bytes[root] = gbytes
            total_flops += gflops
            total_bytes += gbytes
        duration = sum(weights.values()) + model._ns(model.chip.kernel_fixed_ns * 1e-9)
        listed = [run.node for run in costs if per_node.get(run.node) is not None]
        shares = _apportion(duration, [weights[n] for n in listed]) if listed else []
        ops: list[GraphOp] = []
        offset = 0
        for n, share in zip(listed, shares, strict=True):
            c = per_node[n]
            name = n.target._overloadpacket._qualified_op_name
            ops.append(
                GraphOp(
                    op=name,
                    offset_ns=offset,
                    duration_ns=share,
                    flops=c.flops,
                    bytes_moved=node_bytes.get(n, 0),
                    engine=engine_for(name, c.matrix),
                )
            )
            offset += share
        return _GraphCost(
            flops=total_flops,
            bytes_moved=total_bytes,
            dtype=dtype,
            matrix=matrix,
            duration_ns=duration,
            ops=tuple(ops),
        )


def compile_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str = "forward", **_: Any
) -> NeuronGraph:
    """AOTAutograd's / Inductor's inner compiler for neuron graphs."""
    return NeuronGraph(gm, kind)


def inductor_inner_compile(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> NeuronGraph:
    if kwargs.get("is_backward"):
        kind = "backward"
    elif kwargs.get("is_inference"):
        kind = "inference"
    else:
        kind = "forward"
    return NeuronGraph(gm, kind)


def neuron_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable[..., Any]:
    """``torch.compile(model, backend="neuron")``."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=functools.partial(compile_graph, kind="forward"),
        bw_compiler=functools.partial(compile_graph, kind="backward"),
        inference_compiler=functools.partial(compile_graph, kind="inference"),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def _on_neuron(inputs: Sequence[Any]) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in inputs)


def install() -> None:
    """Skip the emulator in Dynamo, trace device tensors as dense tensors, register the
    ``neuron`` backend and route Inductor's neuron graphs to ``NeuronGraph`` (idempotent)."""
    global _installed
    if _installed:
        return
    import torch._dynamo
    from torch._dynamo import trace_rules
    from torch._dynamo.backends.registry import register_backend
    from torch._dynamo.variables import builder

    trace_rules.add("neuron_profiler.emulator")

    wrap = builder.VariableBuilder._wrap

    @functools.wraps(wrap)
    def _wrap(self: Any, value: Any) -> Any:
        if isinstance(value, NeuronTensor):
            return self.wrap_tensor(value)
        return wrap(self, value)

    builder.VariableBuilder._wrap = _wrap
    register_backend(name=BACKEND)(neuron_backend)

    wrapper = torch._TorchCompileInductorWrapper
    call = wrapper.__call__

    @functools.wraps(call)
    def _call(self: Any, model_: Any, inputs_: Any, *, config_patches: Any = None) -> Any:
        if not _on_neuron(inputs_):
            return call(self, model_, inputs_, config_patches=config_patches)
        from torch._inductor.compile_fx import compile_fx

        patches = {**INDUCTOR_DEFAULTS, **self.config, **(config_patches or {})}
        if patches.get("triton.cudagraphs"):
            raise EmulatorError(REDUCE_OVERHEAD_REFUSED)
        return compile_fx(
            model_, inputs_, config_patches=patches, inner_compile=inductor_inner_compile
        )

    wrapper.__call__ = _call
    _installed = True
