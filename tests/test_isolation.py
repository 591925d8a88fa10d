"""Issue 29: a test leaves nothing behind for the tests after it, whatever order they run in.

Each check runs pytest in a subprocess of its own with explicit node ids, so the order is the one given here
and the process is fresh: a browser test and a long-connection test in one process, both ways round (Playwright's
loop once broke every later long connection), and tests/isolation.py failing the tests that leave something.
The subprocesses run on SQLite: a second test database on the PostgreSQL of a DATABASE_URL run would clobber
this run's own.
"""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.browser.conftest import CHROMIUM

REPOSITORY = Path(__file__).resolve().parents[1]
BROWSER_TEST = (
    "tests/browser/test_playground.py::test_the_playground_shows_a_reply_and_a_gate_decision_beside_each_message"
)
LONG_CONNECTION_TEST = "tests/feishu/test_longconn.py::test_g6_wrong_app_secret_fails_without_retrying_and_records_why"
SUBPROCESS_TIMEOUT_SECONDS = 240


def pytest_outcomes(arguments: list[str], *, directory: Path) -> list[tuple[str, str]]:
    """Run pytest in a fresh process on SQLite, in the order given; (test name, outcome) in the order run."""
    report = directory / "report.xml"
    environment = {
        name: value for name, value in os.environ.items() if name not in ("DATABASE_URL", "REDIS_URL", "PYTEST_ADDOPTS")
    }
    environment["BROWSER_SCREENSHOTS_DIR"] = str(directory / "screenshots")
    command = [sys.executable, "-m", "pytest", "-p", "no:random_order", "-p", "no:randomly", f"--junitxml={report}"]
    finished = subprocess.run(
        command + arguments,
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_SECONDS,
    )
    assert report.exists(), finished.stdout[-3000:] + finished.stderr[-3000:]
    outcomes: dict[str, str] = {}
    # A test whose teardown fails after it passed is reported twice (a pass, then an error): the worse one counts.
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcome = "failed" if kinds & {"failure", "error"} else ("skipped" if kinds else "passed")
        name = case.get("name", "")
        if outcomes.get(name) != "failed":
            outcomes[name] = outcome
    return list(outcomes.items())


def node_name(node_id: str) -> str:
    return node_id.rpartition("::")[2]


@pytest.mark.browser
@pytest.mark.parametrize(
    "order",
    [(BROWSER_TEST, LONG_CONNECTION_TEST), (LONG_CONNECTION_TEST, BROWSER_TEST)],
    ids=["browser-first", "long-connection-first"],
)
def test_a_browser_test_and_a_long_connection_test_pass_in_one_process_in_either_order(order, tmp_path):
    # given: Chromium where it is installed (without it the browser test is skipped, the other still runs)
    browser_outcome = "passed" if CHROMIUM.exists() else "skipped"
    expected = {BROWSER_TEST: browser_outcome, LONG_CONNECTION_TEST: "passed"}
    # when
    outcomes = pytest_outcomes(list(order), directory=tmp_path)
    # then: both ran, in the order given, and neither failed (nor its teardown's isolation check)
    assert outcomes == [(node_name(node_id), expected[node_id]) for node_id in order]


LEAKY_TESTS = """
import asyncio
import os
import signal
import threading

import pytest

stop = threading.Event()


@pytest.fixture(scope="module")
def module_server():
    thread = threading.Thread(target=stop.wait, name="module-server", daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


def test_leaves_a_thread():
    threading.Thread(target=threading.Event().wait, name="left-thread", daemon=True).start()


def test_leaves_an_environment_variable():
    os.environ["ISOLATION_LEFT"] = "1"


def test_leaves_a_running_loop():
    asyncio._set_running_loop(asyncio.new_event_loop())


def test_leaves_a_signal_handler():
    signal.signal(signal.SIGTERM, lambda *_: None)


def test_leaves_another_working_directory(tmp_path):
    os.chdir(tmp_path)


def test_cleans_up_after_itself(monkeypatch):
    monkeypatch.setenv("ISOLATION_RESTORED", "1")
    thread = threading.Thread(target=lambda: None, name="joined-thread")
    thread.start()
    thread.join()


def test_uses_a_module_server(module_server):
    assert module_server.is_alive()


def test_uses_the_module_server_again(module_server):
    assert module_server.is_alive()
"""


def test_the_isolation_check_fails_the_tests_that_leave_something_and_only_them(tmp_path):
    # given: tests that leave a thread, an environment variable, a running loop, a signal handler and another
    # working directory, and tests that do not (one undoes its change, two share a module-scoped server)
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(LEAKY_TESTS))
    # when: run alone with only the isolation plugin (and its pytest-django import), outside the project's tests
    outcomes = pytest_outcomes(
        ["-p", "no:django", "-p", "tests.isolation", "--rootdir", str(tmp_path), str(tmp_path / "test_leaky.py")],
        directory=tmp_path,
    )
    # then
    assert outcomes == [
        ("test_leaves_a_thread", "passed"),  # background work is checked where the module ends
        ("test_leaves_an_environment_variable", "failed"),
        ("test_leaves_a_running_loop", "failed"),
        ("test_leaves_a_signal_handler", "failed"),
        ("test_leaves_another_working_directory", "failed"),
        ("test_cleans_up_after_itself", "passed"),
        ("test_uses_a_module_server", "passed"),
        ("test_uses_the_module_server_again", "failed"),  # where the module ends: the first test's thread
    ]
