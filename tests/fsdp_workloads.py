"""FSDP workloads for the distributed emulator tests, run inside rank processes (ranks.py).

``TinyLlama`` is shaped like TorchTitan's Llama (token embedding, a dict of decoder blocks with
RMSNorm, grouped-query attention with rotary embeddings and SwiGLU feed-forward, final norm,
output projection), at a size that trains in well under a second per step on a shared CPU.
``shard_llama`` wraps it as TorchTitan does: activation checkpointing per block, one
``fully_shard`` per block, then the root. ``train`` runs a few AdamW steps with gradient clipping
on data that is the same for every device, each rank taking its slice of the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 64
    ffn_hidden: int = 48
    seq_len: int = 16
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(cfg: LlamaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin of the rotary angles, (seq_len, head_dim // 2): real tables, no complex dtype."""
    head_dim = cfg.dim // cfg.n_heads
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(cfg.seq_len).float(), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., 2i], x[..., 2i+1]) by the position's angle; x: (b, s, h, d)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class TinyLlama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg) for i in range(cfg.n_layers)})
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))


def make_llama(cfg: LlamaConfig, seed: int = 0) -> TinyLlama:
    torch.manual_seed(seed)
    return TinyLlama(cfg)


def shard_llama(model: TinyLlama, mesh, *, reshard_after_forward: bool = True, mp_policy=None):
    """TorchTitan's recipe: checkpoint each block, ``fully_shard`` each block, then the root."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp_policy = mp_policy or MixedPrecisionPolicy()
    for name, block in list(model.layers.items()):
        wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
        fully_shard(
            wrapped, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy
        )
        model.layers[name] = wrapped
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy)
    return model


def llama_batches(cfg: LlamaConfig, steps: int, batch: int, seed: int = 1) -> list[torch.Tensor]:
    """Token batches of ``seq_len + 1`` (inputs and next-token targets), on the host."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len + 1), generator=g)
        for _ in range(steps)
    ]


def make_mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)
    )


def mlp_batches(steps: int, batch: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, 8, generator=g), torch.randn(batch, 4, generator=g))
        for _ in range(steps)
    ]


def train(
    model: nn.Module,
    batches: list,
    device: str,
    rank: int,
    world: int,
    *,
    clip: float | None = 1.0,
    adam: bool = True,
    group=None,  # noqa: ANN001 - the ranks' process group (None: the default group)
) -> list[float]:
    """AdamW (lr 1e-2) or SGD (lr 0.1) steps on this rank's slice of each global batch; returns
    the global mean loss of each step (all-reduced: every rank reports the same figure).

    SGD keeps parameter differences proportional to gradient differences; AdamW divides each
    update by the gradient's running magnitude, so a gradient near zero that differs in its last
    bf16 bit can move a parameter by up to lr either way."""
    import torch.distributed as dist

    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=1e-2) if adam else torch.optim.SGD(params, lr=0.1)
    losses = []
    for batch in batches:
        opt.zero_grad()
        if isinstance(batch, tuple):  # MLP regression
            x, y = (t.chunk(world)[rank].to(device) for t in batch)
            loss = F.mse_loss(model(x).float(), y)
        else:  # next-token prediction
            tokens = batch.chunk(world)[rank].to(device)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, group=group)
        losses.append(total.item() / world)
    return losses


def full_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter, unsharded, on the host (``get_model_state_dict`` full state dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True)  # on every rank (cpu_offload: rank 0 only)
    state = get_model_state_dict(model, options=options)
    return {k: v.detach().cpu().clone() for k, v in state.items()}
