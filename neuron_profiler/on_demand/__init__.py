"""On-demand capture of a running job, daemon-free (docs/capture.md).

One line in the training script arms it::

    from neuron_profiler import on_demand
    on_demand.enable(dir="/tmp/np-capture")

and ``neuron-prof capture --pid PID --steps 3 -o /tmp/np-capture`` then profiles that process's
next steps. Steps are counted at each ``optimizer.step()`` (a global optimizer step post-hook);
a loop without an optimizer calls ``on_demand.step()`` once per step.

Importing this package does not import torch; ``enable`` does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuron_profiler.on_demand.agent import Agent

ENV_VAR = "NEURON_PROFILER_ON_DEMAND"

_agent: Agent | None = None


def enable(dir: str | os.PathLike[str] | None = None) -> None:  # noqa: A002 - the issue's name
    """Arm this process: register it in ``dir`` (None: ``$NEURON_PROFILER_ON_DEMAND``) and
    check there for capture requests at each step. Arming again with another directory moves
    the registration. Not done at ``import neuron_profiler`` (docs/capture.md says why)."""
    global _agent
    from neuron_profiler.on_demand.agent import Agent

    if dir is None:
        dir = os.environ.get(ENV_VAR) or None  # noqa: A001
        if dir is None:
            raise ValueError(f"on_demand.enable: no dir given and ${ENV_VAR} is not set")
    directory = Path(dir).resolve()
    if _agent is not None:
        if _agent.directory == directory and _agent.pid == os.getpid():
            return
        _agent.disarm()
    agent = Agent(directory)
    agent.arm()
    _agent = agent


def disable() -> None:
    """Disarm: no more checks; the registration file is removed."""
    global _agent
    if _agent is not None:
        _agent.disarm()
        _agent = None


def step() -> None:
    """The step marker for loops without an optimizer (one call per training step)."""
    if _agent is not None:
        _agent.step()


def is_enabled() -> bool:
    return _agent is not None
