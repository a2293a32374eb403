"""Write a larger SYNTHETIC Neuron Explorer profile (Parquet tables + legacy JSON) for benches
and manual checks: the generator of tests/explorer_fixture.py (the documented columns, the
workshop's event mix per 20 executions), scaled by the number of executions.

    python bench/gen_explorer.py 2000 -o runs/bench/explorer_2000   # ~963k events
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from explorer_fixture import build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("executions", type=int, help="executions (20 give the workshop's 9,634 events)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="profile directory to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--legacy", action="store_true", help="also write system_profile.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    fx = build(args.executions, args.seed)
    fx.write(args.output, legacy=args.legacy)
    print(f"wrote {len(fx.events)} events to {args.output} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
