"""Hugging Face ``generate()`` on the emulated device in timing mode, run as a subprocess by
tests/integration/test_emulator_timing_hybrid.py (which bounds its time).

    python tests/generate_timing_mode.py tiny|wide NEW_TOKENS [tiny|wide NEW_TOKENS ...]

Builds a random-weight GPT-2 from a config (offline, no download), generates ``NEW_TOKENS``
tokens greedily, by sampling (fixed seed) and by beam search (2 beams) in timing mode, and the
same on CPU, and prints one JSON line per (config, NEW_TOKENS) pair, in order (several pairs share one
process: importing torch and transformers is most of a run's time): per mode the output shape, whether the tokens equal CPU's,
the new tokens' values and the ModelledValueWarnings raised. ``tiny``: every op is under the real-computation
thresholds (outputs.py), so timing mode computes it all; ``wide``: the 8192-token vocabulary's
embedding and logits are large, so they are modelled (zeros) while the loop's integer work is not.
"""

from __future__ import annotations

import copy
import json
import sys
import warnings
from typing import Any

import torch

import neuron_profiler.emulator as emu
from neuron_profiler.emulator.modelled import ModelledValueWarning

CONFIGS = {
    # vocab, width: tiny is all small ops; wide's embedding (8192x64) and lm_head are large
    "tiny": (96, 32),
    "wide": (8192, 64),
}
MODES = {
    "greedy": {"do_sample": False},
    "sample": {"do_sample": True, "top_k": 20, "top_p": 0.9, "temperature": 0.7},
    "beam": {"do_sample": False, "num_beams": 2},
}
PROMPT = (2, 6)  # batch, prompt length
EOS = 1  # a wide model's logits are modelled zeros: argmax is token 0, never EOS


def main() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    pairs = sys.argv[1:]
    for name, new_tokens in zip(pairs[::2], pairs[1::2], strict=True):
        print(json.dumps(generate(transformers, name, int(new_tokens))), flush=True)


def generate(transformers: Any, name: str, new_tokens: int) -> dict[str, Any]:
    """One config's result (see the module docstring), from a freshly enabled emulator."""
    vocab, width = CONFIGS[name]
    emu.enable(cores=1, numerics=False)
    cfg = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=64,
        n_embd=width,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        # tiny runs for real: without an EOS every mode makes exactly new_tokens tokens
        eos_token_id=EOS if name == "wide" else None,
    )
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    dev = copy.deepcopy(ref).to("neuron")
    ids = torch.randint(2, vocab, PROMPT)
    mask = torch.ones_like(ids)
    result: dict[str, Any] = {}
    for mode, kwargs in MODES.items():
        common = dict(max_new_tokens=new_tokens, pad_token_id=0, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.manual_seed(1)
            out = dev.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **common)
            host = out.cpu()
        torch.manual_seed(1)
        want = ref.generate(ids, attention_mask=mask, **common)
        result[mode] = {
            "shape": list(host.shape),
            "equal_cpu": host.shape == want.shape and bool(torch.equal(host, want)),
            "prompt_kept": bool(torch.equal(host[:, : PROMPT[1]], ids)),
            "new_token_values": sorted(set(host[:, PROMPT[1] :].flatten().tolist())),
            "modelled_warnings": [
                str(w.message) for w in caught if issubclass(w.category, ModelledValueWarning)
            ],
        }
    return result


if __name__ == "__main__":
    main()
