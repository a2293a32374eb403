"""The package root and the analysis/export side must stay torch-free (the CLI starts fast)."""

from __future__ import annotations

import subprocess
import sys

TORCH_FREE_MODULES = [
    "neuron_profiler",
    "neuron_profiler.trace",
    "neuron_profiler.cli.main",
    "neuron_profiler.runtime_trace.format",
    "neuron_profiler.costmodel.chips",
    "neuron_profiler.costmodel.ops",
    "neuron_profiler.costmodel.roofline",
    "neuron_profiler.costmodel.fallbacks",
    "neuron_profiler.analysis.projection",
    "neuron_profiler.analysis.device_costs",
    "neuron_profiler.analysis.what_if",
    "neuron_profiler.analysis.graph_launches",
    "neuron_profiler.reports.projection_json",
    "neuron_profiler.reports.projection_terminal",
]


def test_torch_free_imports() -> None:
    from neuron_profiler.cli.main import SUBCOMMANDS

    modules = TORCH_FREE_MODULES + [t.split(":")[0] for t in SUBCOMMANDS.values()]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_help_lists_subcommands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    from neuron_profiler.cli.main import SUBCOMMANDS

    for name in SUBCOMMANDS:
        assert name in out.stdout


def test_layers_import_only_downwards() -> None:
    """trace files -> trace model -> analyses: ``analysis`` and ``trace`` never import the
    runtime side (runtime_trace, collectors, emulator); exporters never import it either."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "neuron_profiler"
    forbidden = (
        "neuron_profiler.runtime_trace",
        "neuron_profiler.collectors",
        "neuron_profiler.emulator",
    )
    offenders = []
    for package in ("analysis", "trace", "exporters", "reports", "costmodel"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                offenders += [f"{path.name}: {n}" for n in names if n.startswith(forbidden)]
    assert offenders == []


def test_trace_keys_spelled_once() -> None:
    """Every key, category, prefix and name of the trace vocabulary is spelled in vocabulary.py
    and nowhere else in the package."""
    import ast
    from pathlib import Path

    from neuron_profiler.runtime_trace import format as F
    from neuron_profiler.trace import vocabulary as V

    root = Path(__file__).resolve().parents[2] / "neuron_profiler"

    def distinctive(v: str) -> bool:  # plain words like "bytes" or "kernel" are not keys
        return len(v) > 2 and (v != v.lower() or not v.isalpha())

    def spelled(v: object) -> list[str]:  # a constant, or the texts of a table of them
        items = list(v.values()) if isinstance(v, dict) else v
        items = list(items) if isinstance(items, tuple | frozenset) else [items]
        return [x for x in items if isinstance(x, str)]

    keys = {
        x
        for k, v in vars(V).items()
        if k.isupper()
        for x in spelled(v)
        # op names are torch's (tables like the cost model's fallback set list them)
        if distinctive(x) and not x.startswith("aten::")
    }
    keys -= {F.DATA_EXEC_ID}  # the runtime's own key (runtime_trace/format.py), reused as args key
    assert {V.MODULE_PREFIX, V.CAT_MEMCPY, V.DIR_H2D, V.MEMORY_EVENT, V.CORE_PROCESS_PREFIX} <= keys
    # (file, text): the same spelling with another meaning
    elsewhere = {
        # the --json document's keys
        ("reports/json_report.py", V.DIST_WORLD_SIZE),
        ("reports/json_report.py", V.DIR_D2H),
        ("reports/json_report.py", V.DIR_H2D),
        ("reports/terminal.py", "DMA"),  # a column header
        # the name torch.neuron.get_device_name returns (emulator/: another branch's files)
        ("emulator/device.py", V.CORE_PROCESS_PREFIX),
        # its local table's keys (analysis/fallbacks.py: another branch's file)
        ("analysis/fallbacks.py", V.DIR_D2H),
        ("analysis/fallbacks.py", V.DIR_H2D),
    }
    users = [
        p
        for p in root.rglob("*.py")
        # compat/ reproduces HTA's and torch-tb-profiler's tables in those tools' own words;
        # runtime_trace/format.py is the runtime's JSON vocabulary (keys may share a spelling)
        if p.name not in ("vocabulary.py", "format.py")
        and "compat" not in p.relative_to(root).parts
    ]
    assert len(users) > 150
    found = []
    for path in users:
        tree = ast.parse(path.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        rel = path.relative_to(root).as_posix()
        found += [
            (rel, n.lineno, n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant)
            and n.value in keys
            and id(n) not in docs
            and (rel, n.value) not in elsewhere
        ]
    assert found == []
