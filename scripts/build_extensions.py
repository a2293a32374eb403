"""Build the project's C++ extensions into torch's extension cache, two at a time (set-up).

Each builds on first use anyway (cached by source hash); building them here first means the
test suite's workers load them instead of compiling them one by one inside the first tests that
ask, and a build that fails says so once, here. A failure is reported in one line and does not
stop the set-up: the tests that need that extension then fail or skip saying why.

    .venv/bin/python scripts/build_extensions.py [--testing]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# what -> the code that loads it (building it when the cache has no build of these sources).
# The bridge: importing the collectors package builds and registers it, and remembers why not
# (``require`` raises that), so it is not tried twice.
BRIDGE = "import neuron_profiler.collectors as c; c.require()"
TESTING = "from neuron_profiler.collectors._build import load_testing_bridge; load_testing_bridge()"
MEMORY = "from neuron_profiler.emulator.native import load_native; load_native()"


def build(what: str, code: str) -> str | None:
    """None when ``what`` loads (built now or before), else one line saying why not."""
    wrapped = (
        "import sys\nfrom neuron_profiler.errors import CollectorUnavailableError\n"
        f"try:\n    {code}\nexcept CollectorUnavailableError as err:\n    sys.exit(str(err))\n"
    )
    done = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True)
    sys.stderr.write(
        "".join(line + "\n" for line in done.stderr.splitlines() if "building" in line)
    )
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return f"{what}: {last}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testing", action="store_true", help="also the bridge's test module")
    args = parser.parse_args()
    # the bridge and the memory extension side by side; the test module after the bridge (it
    # imports the collectors package, which loads the bridge)
    chains = [[("the Kineto bridge", BRIDGE)], [("the emulator's memory extension", MEMORY)]]
    if args.testing:
        chains[0].append(("the Kineto bridge's test module", TESTING))
    with ThreadPoolExecutor(len(chains)) as pool:
        results = pool.map(lambda chain: [build(what, code) for what, code in chain], chains)
        problems = [p for chain in results for p in chain if p is not None]
    for problem in problems:
        print(f"neuron-profiler: not built: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
