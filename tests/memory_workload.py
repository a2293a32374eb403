"""The training loop whose device memory the emulator tests work out by hand: SGD on
sum(x @ w), with no temporaries beyond the ones counted in ``STEP_PEAK``. Shared by the
allocator's, the memory counters' and the memory analysis's tests, so the figure is written once."""

from __future__ import annotations

from typing import Any

F32 = 4  # bytes per float32 element
BATCH, WIDTH = 64, 128  # x: (BATCH, WIDTH), w: (WIDTH, WIDTH)
W_BYTES = WIDTH * WIDTH * F32  # the parameter, and its gradient
X_BYTES = BATCH * WIDTH * F32  # the input, and the activation y = x @ w
SCALAR = F32  # the loss, and the ones autograd seeds backward with
# Live at the peak (inside backward, while MmBackward writes w's gradient): w, x, y, the loss,
# the seed gradient (torch.autograd.backward holds it until backward returns) and w's new
# gradient. The gradient then stays allocated as w.grad until ``w.grad = None`` (a buffer lives
# as long as its storage), but by then the seed is gone: the peak is the same either way.
STEP_PEAK = W_BYTES + X_BYTES + X_BYTES + SCALAR + SCALAR + W_BYTES
LEAK_BYTES = 4096 * F32  # one (4096,) float32 tensor kept per step


def model(device: Any) -> tuple[Any, Any]:
    """w (WIDTH, WIDTH) with its gradient, x (BATCH, WIDTH), on ``device``."""
    import torch

    w = torch.randn(WIDTH, WIDTH, device=device, requires_grad=True)
    x = torch.randn(BATCH, WIDTH, device=device)
    return w, x


def train(w: Any, x: Any, steps: int, leak: list | None = None, prof: Any = None) -> None:
    """``steps`` steps; ``leak``: a (4096,) tensor kept in it per step; ``prof``: stepped."""
    import torch

    for _ in range(steps):
        y = x @ w
        loss = y.sum()
        loss.backward()
        with torch.no_grad():
            w.add_(w.grad, alpha=-1e-3)
        w.grad = None
        del y, loss
        if leak is not None:
            leak.append(torch.ones(LEAK_BYTES // F32, device=w.device))
        if prof is not None:
            prof.step()
