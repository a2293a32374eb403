# ruff: noqa: UP031 - %-templates keep the JSON braces readable
"""Generate a realistic Kineto (torch.profiler) Chrome trace of N events for load benchmarks.

    python bench/gen_trace.py 1000000 -o runs/bench/traces/gen_1000000.json [--modules]

The shape follows the shared A100 trace (hta/tests/data/nccl_parser_config/nccl_data.json.gz):
``cpu_op`` events nested two deep with Kineto's args, ``cuda_runtime`` launches with ``ac2g``
flows (``s`` on the host, ``f`` with ``"bp":"e"`` on the device), kernels with occupancy/grid
args, memcpy/memset, ``fwdbwd`` flows, ``ProfilerStep#N`` annotations, ``M`` metadata events,
µs timestamps with a ns fraction relative to a trailing ``baseTimeNanoseconds``, and the
deviceProperties / distributedInfo header. Deterministic for a given (N, seed). With
``--modules``, module frames as torch.profiler writes them with ``with_stack`` and
``with_modules`` (``python_function`` rows ``nn.Module: <Class>_<k>``): one ``Model_0`` per step
around the forward thread's ops and one ``Layer_<k>`` around each forward op group (k: the
group's place in the step modulo ``LAYERS``, so both seeds share the paths).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import IO

HOST_PID, MAIN_TID, BWD_TID, DEVICE_PID, STREAM = 2910249, 2910249, 2919752, 0, 7
LAYERS = 48  # distinct Layer_<k> module frames per step (--modules)
BASE_TIME_NS = 1711964646000000000
START_US = 4458676388068.751  # relative µs of the same magnitude as the A100 trace (> 2**41)
OPS = [
    ("aten::linear", "aten::addmm"),
    ("aten::conv2d", "aten::cudnn_convolution"),
    ("aten::add_", "aten::add_"),
    ("aten::relu", "aten::clamp_min"),
    ("aten::layer_norm", "aten::native_layer_norm"),
    ("aten::softmax", "aten::_softmax"),
    ("aten::mul", "aten::mul"),
    ("aten::copy_", "aten::copy_"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", "aten::convolution_backward"),
]
KERNELS = [
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)",
    "ampere_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)",
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float, float, "
    "float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
    "float, float const*, float const*, float const*, float*, float*, float*)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float> >, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, float, unsigned int, float, 4>)",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw",
]


def _us(value: float) -> str:
    return f"{value:.3f}"


class _Writer:
    """Formats events into a buffered stream; counts them so the file has exactly N."""

    def __init__(self, out: IO[str], limit: int) -> None:
        self.out, self.limit, self.count, self.parts = out, limit, 0, []

    def full(self) -> bool:
        return self.count >= self.limit

    def add(self, text: str) -> None:
        if self.count < self.limit:
            self.parts.append(text)
            self.count += 1
            if len(self.parts) >= 8192:
                self.flush()

    def flush(self) -> None:
        if self.parts:
            self.out.write(
                ",\n" + ",\n".join(self.parts)
                if self.count > len(self.parts)
                else ",\n".join(self.parts)
            )
            self.parts = []


def _header() -> dict:
    device = {
        "name": "NVIDIA A100-PG509-200",
        "totalGlobalMem": 42297524224,
        "computeMajor": 8,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 108,
    }
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, **device} for i in range(8)],
        "distributedInfo": {
            "backend": "nccl",
            "rank": 0,
            "world_size": 2,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": 2,
                    "ranks": [0, 1],
                }
            ],
            "nccl_version": "2.17.1",
        },
    }


def _metadata(w: _Writer) -> None:
    w.add(
        '{"name": "process_name", "ph": "M", "ts": %s, "pid": %d, "tid": 0, '
        '"args": {"name": "python3.10"}}' % (_us(START_US), HOST_PID)
    )
    w.add(
        '{"name": "process_name", "ph": "M", "ts": %s, "pid": %d, "tid": 0, '
        '"args": {"name": "GPU 0"}}' % (_us(START_US), DEVICE_PID)
    )
    w.add(
        '{"name": "process_sort_index", "ph": "M", "ts": %s, "pid": %d, "tid": 0, '
        '"args": {"sort_index": 5000000}}' % (_us(START_US), DEVICE_PID)
    )
    for tid, name in (
        (MAIN_TID, "thread 2910249 (python3.10)"),
        (BWD_TID, "thread 2919752 (pt_autograd_0)"),
    ):
        w.add(
            '{"name": "thread_name", "ph": "M", "ts": %s, "pid": %d, "tid": %d, '
            '"args": {"name": "%s"}}' % (_us(START_US), HOST_PID, tid, name)
        )
    w.add(
        '{"name": "thread_name", "ph": "M", "ts": %s, "pid": %d, "tid": %d, '
        '"args": {"name": "stream 7"}}' % (_us(START_US), DEVICE_PID, STREAM)
    )


def _op_group(w: _Writer, rng: random.Random, t: float, dev_t: float, ids: list[int]) -> tuple:
    """One aten op -> child op -> launch (+flow) -> device work (+flow); returns new clocks
    and whether the op ran on the forward (main) thread."""
    ext, corr, seq = ids
    parent, child = OPS[rng.randrange(len(OPS))]
    tid = BWD_TID if parent.startswith("autograd") else MAIN_TID
    dur = rng.uniform(20.0, 200.0)
    w.add(
        '{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": %d, "tid": %d, "ts": %s, '
        '"dur": %s, "args": {"External id": %d, "Record function id": %d, '
        '"Sequence number": %d, "Fwd thread id": 1, "Ev Idx": %d}}'
        % (parent, HOST_PID, tid, _us(t), _us(dur), ext, ext - 140, seq, ext % 997)
    )
    w.add(
        '{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": %d, "tid": %d, "ts": %s, '
        '"dur": %s, "args": {"External id": %d, "Record function id": %d, "Ev Idx": %d}}'
        % (
            child,
            HOST_PID,
            tid,
            _us(t + 3.217),
            _us(dur - 6.5),
            ext + 1,
            ext - 139,
            (ext + 1) % 997,
        )
    )
    launch = t + 6.101
    kind = rng.random()
    api, cbid = ("cudaMemcpyAsync", 41) if kind < 0.06 else ("cudaLaunchKernel", 211)
    w.add(
        '{"ph": "X", "cat": "cuda_runtime", "name": "%s", "pid": %d, "tid": %d, "ts": %s, '
        '"dur": %s, "args": {"External id": %d, "cbid": %d, "correlation": %d}}'
        % (api, HOST_PID, tid, _us(launch), _us(rng.uniform(3.0, 12.0)), ext + 1, cbid, corr)
    )
    w.add(
        '{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g"}'
        % (corr, HOST_PID, tid, _us(launch))
    )
    start = max(dev_t, launch + 4.0)
    kdur = rng.uniform(1.5, 90.0)
    if kind < 0.06:
        nbytes = rng.choice((4000, 65536, 6291456))
        w.add(
            '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", '
            '"pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, '
            '"device": 0, "context": 1, "stream": %d, "correlation": %d, "bytes": %d, '
            '"memory bandwidth (GB/s)": %.6f}}'
            % (
                DEVICE_PID,
                STREAM,
                _us(start),
                _us(kdur),
                ext + 1,
                STREAM,
                corr,
                nbytes,
                nbytes / kdur / 1e3,
            )
        )
    else:
        grid = rng.choice((512, 1024, 2048, 80))
        w.add(
            '{"ph": "X", "cat": "kernel", "name": "%s", "pid": %d, "tid": %d, "ts": %s, '
            '"dur": %s, "args": {"External id": %d, "queued": 0, "device": 0, "context": 1, '
            '"stream": %d, "correlation": %d, "registers per thread": %d, '
            '"shared memory": %d, "blocks per SM": %.6f, "warps per SM": %.6f, '
            '"grid": [%d, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %%": %d}}'
            % (
                KERNELS[rng.randrange(len(KERNELS))],
                DEVICE_PID,
                STREAM,
                _us(start),
                _us(kdur),
                ext + 1,
                STREAM,
                corr,
                rng.choice((32, 40, 64, 128)),
                rng.choice((0, 400, 16384)),
                grid / 108,
                grid * 8 / 108,
                grid,
                rng.randrange(20, 100),
            )
        )
    w.add(
        '{"ph": "f", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", '
        '"name": "ac2g", "bp": "e"}' % (corr, DEVICE_PID, STREAM, _us(start))
    )
    if rng.random() < 0.04:
        w.add(
            '{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": %d, '
            '"tid": %d, "ts": %s, "dur": 4.960, "args": {"External id": %d, "device": 0, '
            '"context": 1, "stream": %d, "correlation": %d, "bytes": 6291456, '
            '"memory bandwidth (GB/s)": 1268.438710}}'
            % (DEVICE_PID, STREAM, _us(start + kdur + 0.5), ext + 1, STREAM, corr + 1)
        )
    if rng.random() < 0.04:
        w.add(
            '{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "fwdbwd", '
            '"name": "fwdbwd"}' % (seq, HOST_PID, MAIN_TID, _us(t))
        )
        w.add(
            '{"ph": "f", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "fwdbwd", '
            '"name": "fwdbwd", "bp": "e"}' % (seq, HOST_PID, BWD_TID, _us(t + dur / 2))
        )
    return t + dur + rng.uniform(1.0, 15.0), start + kdur + 0.3, tid == MAIN_TID


def _module_frame(w: _Writer, name: str, start: float, end: float) -> None:
    w.add(
        '{"ph": "X", "cat": "python_function", "name": "nn.Module: %s", "pid": %d, "tid": %d, '
        '"ts": %s, "dur": %s, "args": {"Python parent id": 1, "Python id": 2, '
        '"Python module id": 0}}' % (name, HOST_PID, MAIN_TID, _us(start), _us(end - start))
    )


def generate(n_events: int, out: IO[str], seed: int = 0, modules: bool = False) -> int:
    """Write a trace of exactly ``n_events`` traceEvents to ``out``; returns the count.
    ``modules``: with nn.Module frames (the module docstring)."""
    rng = random.Random(seed)
    w = _Writer(out, n_events)
    header = json.dumps(_header())
    out.write(header[:-1] + ', "traceEvents": [\n')
    _metadata(w)
    t = dev_t = START_US
    ext, corr, step = 1000, 50000, 0
    while not w.full():
        step_start, groups = t, rng.randrange(300, 600)
        step_dev = dev_t
        forward = 0
        for _ in range(groups):
            if w.full():
                break
            begin = t
            t, dev_t, on_main = _op_group(w, rng, t, dev_t, [ext, corr, ext // 2])
            ext, corr = ext + 2, corr + 3
            if modules and on_main:
                _module_frame(w, f"Layer_{forward % LAYERS}", begin - 0.2, t - 0.5)
                forward += 1
        if modules:
            _module_frame(w, "Model_0", step_start - 0.4, t - 0.1)
        w.add(
            '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": %d, '
            '"tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, '
            '"Record function id": 0, "Ev Idx": 0}}'
            % (step, HOST_PID, MAIN_TID, _us(step_start), _us(t - step_start), ext)
        )
        w.add(
            '{"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#%d", "pid": %d, '
            '"tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d}}'
            % (step, DEVICE_PID, STREAM, _us(step_dev), _us(dev_t - step_dev), ext)
        )
        step, ext = step + 1, ext + 1
    w.flush()
    out.write(
        '\n], "traceName": "/tmp/gen_trace.json", "displayTimeUnit": "ms", '
        '"baseTimeNanoseconds": %d}\n' % BASE_TIME_NS
    )
    return w.count


def generate_file(n_events: int, path: Path, seed: int = 0, modules: bool = False) -> Path:
    """Write the trace to ``path`` (.json or .json.gz), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    if path.name.endswith(".gz"):
        with gzip.open(tmp, "wt", compresslevel=6) as fh:
            generate(n_events, fh, seed, modules)
    else:
        with open(tmp, "w") as fh:
            generate(n_events, fh, seed, modules)
    tmp.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", type=int, help="number of traceEvents to write")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modules", action="store_true", help="with nn.Module frames")
    args = parser.parse_args()
    generate_file(args.events, args.output, args.seed, args.modules)
    print(f"wrote {args.events} events to {args.output}")


if __name__ == "__main__":
    main()
