"""Issue 28, goal 6: `python -m bench <name> --help` prints what the bench measures and runs nothing, and every
run is framed by the load average and a comparability verdict (the benches themselves are not part of CI)."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench import hygiene
from bench.__main__ import main

REPOSITORY = Path(__file__).resolve().parents[1]


def test_i28_help_prints_the_bench_description_and_runs_nothing(capsys, monkeypatch):
    # given: a bench whose run() would start servers for minutes
    import bench.bench_pipeline

    monkeypatch.setattr(bench.bench_pipeline, "run", lambda: pytest.fail("--help ran the bench"))

    # when
    main(["pipeline", "--rates", "5", "--help"])

    # then
    out = capsys.readouterr().out
    assert "=== pipeline" in out and "--rates" in out and "load average at start" not in out


def test_i28_an_unknown_bench_name_is_an_error_not_a_run_of_every_bench():
    with pytest.raises(SystemExit, match="unknown bench nope"):
        main(["nope"])


def test_i28_a_run_prints_the_load_at_start_and_end_and_marks_a_busy_start(capsys, monkeypatch):
    # given: a busy machine (load 9 on this machine's cores) and a bench that prints one figure
    import bench.bench_web_burst

    monkeypatch.setattr(hygiene.os, "getloadavg", lambda: (0.1, 9.0 * hygiene.cores(), 1.0))  # a lull in a busy hour
    monkeypatch.setattr(bench.bench_web_burst, "run", lambda: print("figure 42"))

    # when
    main(["web_burst"])

    # then
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3].startswith("load average at start:") and "NOT COMPARABLE" in lines[-3]
    assert lines[-2] == "figure 42"
    assert lines[-1].startswith("load average at end:") and "NOT COMPARABLE" in lines[-1]


def test_i28_a_quiet_start_is_comparable_and_goal_figures_are_ratios():
    assert "figures comparable" in hygiene.comparability_note(0.1)
    assert hygiene.ratio(30.0, 20.0) == "30.0 = 1.50x floor 20.0"


def test_i28_the_module_entry_point_help_exits_at_once():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "pipeline", "--seconds", "5", "--help"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "===" in done.stdout, done.stderr


def test_i28_several_benches_run_each_in_an_interpreter_of_its_own_with_the_flags(monkeypatch):
    # given: two benches that each configure Django for a database of their own
    import bench.__main__ as entry

    commands: list[list[str]] = []
    monkeypatch.setattr(entry.subprocess, "run", lambda command, check: commands.append(command))

    # when
    main(["deaf", "catchup", "--seconds", "5"])

    # then
    assert [command[1:] for command in commands] == [
        ["-m", "bench", "deaf", "--seconds", "5"],
        ["-m", "bench", "catchup", "--seconds", "5"],
    ]


def test_i22_a_hot_topic_message_collected_into_a_turn_is_answered_when_that_turn_replies():
    # given: turn 1 answered its own message; turn 3 collected turn 2 and replied to the newest (turn 3's message)
    from bench.answers import answered_at

    turns = [(1, "om_hot0", "delivered", []), (2, "om_hot1", "skipped", None), (3, "om_hot2", "delivered", [2])]
    replies = {"om_hot0": 10.0, "om_hot2": 12.5}

    # then: the collected message is answered by the reply of the turn that collected it
    assert answered_at(turns, replies) == {"om_hot0": 10.0, "om_hot1": 12.5, "om_hot2": 12.5}
