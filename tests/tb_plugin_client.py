"""Shared by the TensorBoard plugin tests (tests/*/test_tb_plugin*.py): the plugin behind
TensorBoard's WSGI app with werkzeug's test client, ids by names, the emulator script that
makes a trace with findings, and ``neuron-prof analyze --json`` as a separate process (or in
this process, ``cli_json``, where the test's subject is the plugin, not the CLI's process)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PLUGIN_NAME = "neuron_profiler"
ROUTE = f"/data/plugin/{PLUGIN_NAME}"

# Timing mode (numerics=False); each step: matmuls, a host sync (.item()), a CPU-fallback op
# (bincount) and a second sync. Writes {dir}/emu.<time_ns>.pt.trace.json (TensorBoard's naming).
EMULATOR_SCRIPT = r"""
import sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, chip="trn2", numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

dev = torch.device("neuron:0")
w = torch.randn(512, 512).to(dev)
idx = torch.randint(0, 128, (100_000,)).to(dev)
with profile(activities=[ProfilerActivity.CPU, NEURON], schedule=schedule(wait=0, warmup=1, active=3),
             on_trace_ready=tensorboard_trace_handler(sys.argv[1], worker_name="emu")) as p:
    for i in range(4):
        x = torch.randn(64, 512).to(dev)
        for _ in range(4):
            x = torch.relu(x @ w)
        x.sum().item()                  # host sync
        counts = torch.bincount(idx)    # CPU fallback
        (x + counts[:128].float().sum()).sum().item()
        p.step()
"""


def make_emulator_trace(out_dir: Path) -> Path:
    """Run EMULATOR_SCRIPT (a subprocess: the emulator registers a device) into ``out_dir``."""
    proc = subprocess.run(
        [sys.executable, "-c", EMULATOR_SCRIPT, str(out_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out_dir.glob("*.pt.trace.json")
    return path


def make_plugin(logdir: Path, wait_s: float = 120.0):  # noqa: ANN201 - (plugin, Client)
    """The plugin behind TensorBoard's WSGI app; requests wait ``wait_s`` for an analysis
    (long by default, so that answers do not depend on this machine's speed)."""
    from tensorboard.backend.application import TensorBoardWSGI
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from neuron_profiler.tensorboard.plugin import NeuronProfilerLoader

    plugin = NeuronProfilerLoader().load(base_plugin.TBContext(logdir=str(logdir)))
    plugin.cache.wait_s = wait_s
    return plugin, Client(TensorBoardWSGI([plugin]))


def ids(client, run: str, worker: str, span: str | None = None) -> dict[str, str]:  # noqa: ANN001
    """The ids /runs gives for these names (the first span when ``span`` is None)."""
    runs = client.get(f"{ROUTE}/runs").get_json()["runs"]
    r = next(r for r in runs if r["name"] == run)
    w = next(w for w in r["workers"] if w["name"] == worker)
    s = w["spans"][0] if span is None else next(s for s in w["spans"] if s["name"] == span)
    return {"run": r["id"], "worker": w["id"], "span": s["id"]}


def cli_document(logdir: Path, rel: str) -> dict:
    """``neuron-prof analyze --json`` of one file (relative to ``logdir``), as a process."""
    return cli_analysis(logdir, rel)["traces"][0]


def cli_analysis(logdir: Path, rel: str) -> dict:
    """The whole ``neuron-prof analyze --json`` document of one file (relative to ``logdir``),
    as a process: its trace's document and its ``distributed`` section from one run."""
    exe = Path(sys.executable).with_name("neuron-prof")
    proc = subprocess.run(
        [str(exe), "analyze", "--json", rel],
        cwd=logdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def cli_distributed(logdir: Path, *rels: str) -> dict:
    """The ``distributed`` section of ``neuron-prof analyze --json`` of these files (relative
    to ``logdir``), as a process; exit 2 (a file could not be analysed) still prints it."""
    exe = Path(sys.executable).with_name("neuron-prof")
    proc = subprocess.run(
        [str(exe), "analyze", "--json", *rels],
        cwd=logdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    return json.loads(proc.stdout)["distributed"]


def cli_diff(logdir: Path, a: str, b: str, *options: str) -> dict:
    """``neuron-prof diff --json [options] A B`` of two files (relative to ``logdir``), as a
    process."""
    exe = Path(sys.executable).with_name("neuron-prof")
    proc = subprocess.run(
        [str(exe), "diff", "--json", *options, a, b],
        cwd=logdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def cli_json(logdir: Path, *args: str, codes: tuple[int, ...] = (0,)) -> dict:
    """``neuron-prof ARGS`` (``--json``) in this process, from ``logdir`` like the ``cli_*``
    processes: the entry point's own ``main``, its exit code one of ``codes``, its stdout the
    document. Saves an interpreter start and the analysis imports per call (~1.2 s)."""
    from click.testing import CliRunner

    from neuron_profiler.cli.main import main

    with contextlib.chdir(logdir), CliRunner().isolation() as (out, err, _):
        code = main(list(args))
    assert code in codes, err.getvalue().decode()[-2000:]
    return json.loads(out.getvalue())


@contextmanager
def served_plugin(logdir: Path) -> Iterator[tuple[str, Any]]:
    """The plugin over ``logdir`` on a local HTTP server, for a browser: (its page URL, the
    plugin's WSGI test client)."""
    from tensorboard.backend.application import TensorBoardWSGI
    from werkzeug.serving import make_server

    plugin, client = make_plugin(logdir)
    server = make_server("127.0.0.1", 0, TensorBoardWSGI([plugin]), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{ROUTE}/index.html", client
    finally:
        server.shutdown()
        thread.join(timeout=10)


@contextmanager
def headless_chrome(chromium: Path, chromedriver: Path, timeout_s: float) -> Iterator[Any]:
    """A headless Chromium driven by selenium, its console log kept (``plugin_errors``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(chromedriver)), options=options)
    driver.set_page_load_timeout(timeout_s)
    try:
        yield driver
    finally:
        driver.quit()
