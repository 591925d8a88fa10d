"""`make bench`: runs every bench/bench_*.py module's run() in turn and prints its results.

Each benchmark reports ratios measured within one run; none of them is a timed test.
Pass module names to run only some: `python -m bench selection turns`. Arguments that are not names (flags and their values) are a
bench's own flags (it reads them from sys.argv), e.g. `python -m bench dashboard --scale 0.01`.
"""

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    wanted = [f"bench_{name.removeprefix('bench_')}" for name in argv if name.isidentifier()] or names
    for name in wanted:
        print(f"\n=== {name}", flush=True)
        importlib.import_module(f"bench.{name}").run()


if __name__ == "__main__":
    main(sys.argv[1:])
