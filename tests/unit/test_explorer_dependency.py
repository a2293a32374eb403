"""pyarrow is the optional ``explorer`` extra: without it the package still imports, and asking
for Parquet says in one line what to install (pyarrow hidden by a sys.modules entry of None,
which makes every ``import pyarrow`` fail, in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

HIDE_PYARROW = (
    "import sys\n"
    "for name in ('pyarrow', 'pyarrow.compute', 'pyarrow.parquet'):\n"
    "    sys.modules[name] = None\n"
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_PYARROW + code], capture_output=True, text=True, timeout=120
    )


def test_package_imports_without_pyarrow() -> None:
    out = _run(
        "import importlib, pkgutil, neuron_profiler.explorer as E\n"
        "for m in pkgutil.iter_modules(E.__path__):\n"
        "    importlib.import_module('neuron_profiler.explorer.' + m.name)\n"
        "import neuron_profiler.cli.main, neuron_profiler.cli.export, neuron_profiler.cli.merge\n"
        "print('pyarrow' in sys.modules and sys.modules['pyarrow'] is not None)"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_asking_for_parquet_without_pyarrow_names_the_extra() -> None:
    out = _run(
        "from neuron_profiler.explorer._arrow import require_pyarrow\n"
        "from neuron_profiler.errors import MissingDependencyError\n"
        "try:\n"
        "    require_pyarrow('p/SystemProfileEvents.parquet')\n"
        "except MissingDependencyError as err:\n"
        "    print(err.exit_code, err)\n"
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line
    assert line.startswith("3 p/SystemProfileEvents.parquet: ")
    assert "pip install 'neuron-profiler[explorer]'" in line
