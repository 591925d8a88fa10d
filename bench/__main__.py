"""`make bench`: runs every bench/bench_*.py module's run() in turn and prints its results.

Each benchmark reports ratios measured within one run; none of them is a timed test. Around each one this prints
the load average at its start and its end, and "NOT COMPARABLE" when the machine was busy as it started
(bench/hygiene.py). Pass module names to run only some: `python -m bench selection turns`. Arguments from the first
flag on are the benches' own flags (each reads them from sys.argv), e.g.
`python -m bench dashboard --scale 0.01`. `python -m bench [names] --help` prints what the benches measure and
their flags, and runs nothing.
"""

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

from bench import hygiene


def bench_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))


def _first_flag(argv: list[str]) -> int:
    return next((index for index, arg in enumerate(argv) if arg.startswith("-")), len(argv))


def wanted_names(argv: list[str]) -> list[str]:
    """The benches named in argv before its first flag (with or without the bench_ prefix), every bench when none
    is; an unknown name is an error, not a silent run of everything."""
    known = bench_names()
    named = [f"bench_{arg.removeprefix('bench_')}" for arg in argv[: _first_flag(argv)]]
    unknown = [name for name in named if name not in known]
    if unknown:
        raise SystemExit(
            f"unknown bench {', '.join(n[6:] for n in unknown)}; the benches: {', '.join(n[6:] for n in known)}"
        )
    return named or known


def help_text(names: list[str]) -> str:
    sections = ["python -m bench [name ...] [flags]: runs the named benches (every one without a name).\n"]
    for name in names:
        doc = (importlib.import_module(f"bench.{name}").__doc__ or "(no description)").strip()
        sections.append(f"=== {name.removeprefix('bench_')}\n{doc}\n")
    return "\n".join(sections)


def main(argv: list[str]) -> None:
    wanted = wanted_names(argv)
    if "--help" in argv or "-h" in argv:
        print(help_text(wanted))
        return
    if len(wanted) > 1:
        # Each bench in an interpreter of its own: most configure Django for a database of their own at import
        # time, and a second django.setup() in one process would keep the first bench's database.
        flags = argv[_first_flag(argv) :]
        for name in wanted:
            subprocess.run([sys.executable, "-m", "bench", name.removeprefix("bench_"), *flags], check=False)
        return
    for name in wanted:
        print(f"\n=== {name}", flush=True)
        start_load = hygiene.start_load()
        print(hygiene.load_line("start"), "-", hygiene.comparability_note(start_load), flush=True)
        try:
            importlib.import_module(f"bench.{name}").run()
        finally:
            print(hygiene.load_line("end"), "-", hygiene.comparability_note(start_load), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
