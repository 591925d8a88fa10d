"""What every bench prints around its figures (issue 28, goal 6): the load average at its start and its end, and
a plain "NOT COMPARABLE" when the machine was busy as it started (the larger of its 1- and 5-minute load averages
above 1.0 per core).

The machine the benches run on is often shared: at a load of 8 on 2 cores every latency and CPU figure came out
3-4x inflated (issue 28). A figure is comparable with another run's only when both started on a quiet machine,
and a goal is judged by a ratio against its floor measured in the same run, never by absolute milliseconds.
"""

import os

# Above this 1-minute load per core at the start, a run's figures are marked not comparable.
QUIET_LOAD_PER_CORE = 1.0


def cores() -> int:
    return os.cpu_count() or 1


def load_line(when: str) -> str:
    """`load average at start: 0.4 0.3 0.2 (2 cores)`."""
    one, five, fifteen = os.getloadavg()
    return f"load average at {when}: {one:.2f} {five:.2f} {fifteen:.2f} ({cores()} cores)"


def start_load() -> float:
    """The load a run starts on: the larger of the 1- and 5-minute averages, so a momentary lull on a busy
    machine does not pass for a quiet one."""
    one, five, _ = os.getloadavg()
    return max(one, five)


def is_quiet(load: float | None = None) -> bool:
    """Whether a start load (now's by default) leaves each core mostly to the bench."""
    return (start_load() if load is None else load) <= QUIET_LOAD_PER_CORE * cores()


def comparability_note(start_load: float) -> str:
    """The verdict printed at the start and the end of a run."""
    if is_quiet(start_load):
        return (
            f"figures comparable: start load {start_load:.2f} <= {QUIET_LOAD_PER_CORE:.1f} per core x {cores()} cores"
        )
    return (
        f"NOT COMPARABLE: start load {start_load:.2f} > {QUIET_LOAD_PER_CORE:.1f} per core x {cores()} cores; "
        "only the ratios within this run mean something"
    )


def ratio(value: float, floor: float) -> str:
    """A goal figure against its floor measured in the same run: `35.1 ms = 1.62x floor 21.7`."""
    if floor <= 0:
        return f"{value:.1f} (no floor measured)"
    return f"{value:.1f} = {value / floor:.2f}x floor {floor:.1f}"
