"""Host cost of timing mode's real computation of small ops (outputs.computes_for_real):

    python bench/bench_timing_hybrid.py              # ~30 s

For each op family, at the largest size the rule still computes for real and at one just over it
(modelled: zeros), the host time of one op on the emulated device in timing mode, next to the
same op on CPU; best of 7 blocks (other load on the machine only ever adds time). The rule's
thresholds are what bound the first column: docs/emulator.md, "Two modes". Then ``generate()``
of a random-weight GPT-2-small-shaped model (20 new tokens, greedy) in timing mode, whose loop
reads small integer tensors every step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import neuron_profiler.emulator as emu

emu.enable(cores=1, chip="trn2", numerics=False)

import torch  # noqa: E402

from neuron_profiler.emulator import outputs  # noqa: E402

Make = Callable[[int], tuple]  # size -> (fn, args)
FLOAT = outputs.REAL_MAX_ELEMENTS
INDEX = outputs.REAL_MAX_INDEX_ELEMENTS
HEAVY = outputs.HOST_HEAVY_FACTOR


def _float(n: int) -> torch.Tensor:
    return torch.randn(n)


# family -> (fn, args at size n, largest n computed for real)
FAMILIES: dict[str, tuple[Callable, Callable[[int], tuple], int]] = {
    "add (float)": (torch.add, lambda n: (_float(n), _float(n)), FLOAT // 3),
    "exp (float)": (torch.exp, lambda n: (_float(n),), FLOAT // 2),
    "softmax (float)": (lambda x: x.softmax(-1), lambda n: (_float(n)[None],), FLOAT // 2),
    "sum (float)": (torch.sum, lambda n: (_float(n),), FLOAT - 1),
    "mm 64xkx32 (float)": (
        torch.mm,
        lambda k: (torch.randn(64, k), torch.randn(k, 32)),
        outputs.REAL_MAX_FLOPS // (2 * 64 * 32),
    ),
    "cumsum (int64)": (lambda x: x.cumsum(0), lambda n: (torch.randint(0, 9, (n,)),), INDEX // 2),
    "eq (int64)": (torch.eq, lambda n: (torch.randint(0, 9, (n,)), 3), INDEX // 2),
    "sort (float)": (
        lambda x: x.sort(),
        lambda n: (_float(n),),
        FLOAT // (3 * HEAVY),
    ),
    "multinomial (float)": (
        lambda p: torch.multinomial(p, 1),
        lambda n: (torch.rand(1, n),),
        FLOAT // HEAVY - 1,
    ),
}


def best_us(fn: Callable, args: tuple, blocks: int, reps: int) -> float:
    fn(*args)  # warm: the output plan, the allocator
    best = float("inf")
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / reps)
    torch.neuron.synchronize()
    return best * 1e6


def ops(blocks: int, reps: int) -> None:
    print(f"host us per op, timing mode (best of {blocks} x {reps}):")
    print(
        f"  {'family':22s} {'n real':>7s} {'cpu':>8s} {'real':>8s}   {'n over':>7s} {'modelled':>8s}"
    )
    for name, (fn, make, n) in FAMILIES.items():
        over = 2 * n + 2
        host, small, large = make(n), make(n), make(over)
        dev = tuple(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in small)
        big = tuple(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in large)
        cpu = best_us(fn, host, blocks, reps)
        real = best_us(fn, dev, blocks, reps)
        modelled = best_us(fn, big, blocks, reps)
        print(f"  {name:22s} {n:7d} {cpu:8.1f} {real:8.1f}   {over:7d} {modelled:8.1f}")


def generate(tokens: int) -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval().to("neuron")
    ids = torch.randint(0, 50257, (1, 8)).to("neuron")
    model.generate(ids, max_new_tokens=2, pad_token_id=0)  # warm
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=tokens, pad_token_id=0)
    wall = time.perf_counter() - t0
    print(
        f"generate(): GPT-2-small shape, {tokens} new tokens greedy, timing mode: "
        f"{out.shape[1] - 8} tokens in {wall:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()
    ops(args.blocks, args.reps)
    generate(args.tokens)


if __name__ == "__main__":
    import warnings

    from neuron_profiler.emulator.modelled import ModelledValueWarning

    warnings.simplefilter("ignore", ModelledValueWarning)
    main()
