"""Test isolation: no test leaves an event loop, a thread, a child process or changed process state behind.

The invariant, checked at every test's teardown: the process holds what it held when the first test started,
plus what the fixtures still alive started in their setup (watched, and theirs until their teardown).

- State every test sees (a running asyncio loop in this thread, the main thread's event loop, `os.environ`, the
  working directory, the SIGINT and SIGTERM handlers) is checked after each test. A module-scoped fixture may
  hold it for its module (the browser tests' Playwright does); a session-scoped one may not, since every later
  test would see it (issue 29: a session-long Playwright left its loop marked as running and broke the long
  connection's tests hundreds of tests later).
- Background work (threads, child processes) is checked when a module's tests end, after its module-scoped
  fixtures are gone: a module fixture's server may start threads while its tests run. Session fixtures may
  keep theirs (the real Celery worker, the fault suite's servers).

A test that breaks it fails at teardown, naming what it left; what was reported is then accepted, so one leak
fails one test. Also here: `live_server` for one module instead of pytest-django's one per session, so a live
server (a thread and a listening socket) stops with the module that used it.

Registered from tests/conftest.py (`pytest_plugins`).
"""

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_django.live_server_helper import LiveServer

# A thread or process whose owner's teardown has asked it to stop gets this long to be gone before it counts.
SETTLE_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.05

# One thing the process holds: (what kind, which one), e.g. ("thread", "longconn-planner_0 (1407...)").
Holding = tuple[str, str]
THREAD = "thread"
CHILD_PROCESS = "child process"
RUNNING_EVENT_LOOP = "running event loop"
MAIN_THREAD_EVENT_LOOP = "main thread's event loop"
ENVIRONMENT_VARIABLE = "environment variable"
WORKING_DIRECTORY = "working directory"
SIGNAL_HANDLER = "signal handler"
# The signals our code takes over (the long connection's child and supervisor stop on them); pytest's Ctrl-C
# needs SIGINT's back.
WATCHED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Work that runs beside the tests and that they do not see, unlike the rest (state every test sees).
BACKGROUND = frozenset({THREAD, CHILD_PROCESS})
# Threads that live as long as the process by design, started by whichever test first needs them.
PROCESS_THREADS = frozenset(
    {
        "mcp-client-loop",  # agents/mcp/client.py: the MCP clients' one background loop
        "amux-task-relay",  # core/tasks_relay.py: the intake's publisher
        "tqdm_monitor",  # tqdm's, from its first progress bar on (feishu_context_prune); it never stops it
    }
)


def _child_processes() -> set[Holding]:
    """The live child processes of this process (Linux /proc; nothing where it is absent), by command line. Zombies
    do not count: a child that has exited holds no port and runs nothing. No pid: a session fixture's process that
    a test restarts (the real Celery worker, after a test killed it) is still the fixture's."""
    found: set[Holding] = set()
    for children in Path("/proc/self/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:
            continue  # the thread ended after the listing
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # exited between the two reads
            if stat.rpartition(")")[2].split()[0] != "Z":
                found.add((CHILD_PROCESS, command.strip()[:300]))
    return found


def _event_loops() -> set[Holding]:
    found: set[Holding] = set()
    running = asyncio._get_running_loop()
    if running is not None:
        found.add((RUNNING_EVENT_LOOP, f"{type(running).__name__} at {id(running):#x}"))
    # The loop `asyncio.set_event_loop` gave the main thread, read without creating one (get_event_loop would).
    current = getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)
    if current is not None:
        state = "closed" if current.is_closed() else "open"
        found.add((MAIN_THREAD_EVENT_LOOP, f"{type(current).__name__} at {id(current):#x}, {state}"))
    return found


def holdings() -> frozenset[Holding]:
    """Everything this process holds that a test could leave behind."""
    found = {
        (THREAD, f"{thread.name} ({thread.ident})")
        for thread in threading.enumerate()
        if thread.name not in PROCESS_THREADS
    }
    found |= {(ENVIRONMENT_VARIABLE, f"{name}={value}") for name, value in os.environ.items()}
    found |= {(SIGNAL_HANDLER, f"{signum.name}: {signal.getsignal(signum)!r}") for signum in WATCHED_SIGNALS}
    found.add((WORKING_DIRECTORY, os.getcwd()))
    return frozenset(found | _child_processes() | _event_loops())


class IsolationCheck:
    """The pytest plugin that keeps the invariant above."""

    def __init__(self) -> None:
        self.allowed: frozenset[Holding] = frozenset()
        self.has_started = False
        self.fixtures_hold: dict[int, frozenset[Holding]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        if not self.has_started:
            # After collection: what importing the tests did (lark-oapi sets the main thread's loop) is the start.
            self.allowed, self.has_started = holdings(), True
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[object]:
        if fixturedef.scope == "function":
            return (yield)
        before = holdings()
        try:
            return (yield)
        finally:
            started = holdings() - before
            if fixturedef.scope == "session":
                started = frozenset(holding for holding in started if holding[0] in BACKGROUND)
            self.fixtures_hold[id(fixturedef)] = started

    @pytest.hookimpl
    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
        self.fixtures_hold.pop(id(fixturedef), None)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        result = yield  # the test's fixtures are torn down; a teardown that failed is reported as it is
        is_module_end = nextitem is None or nextitem.path != item.path
        left = self._left_behind(is_module_end=is_module_end)
        if left:
            self.allowed |= left
            described = "\n".join(f"  {kind}: {which}" for kind, which in sorted(left))
            who = f"{item.nodeid} (or, for background work, a test before it in its module)"
            pytest.fail(f"{who} left behind (tests/isolation.py):\n{described}", pytrace=False)
        return result

    def _left_behind(self, *, is_module_end: bool) -> frozenset[Holding]:
        # A thread or process that its owner's teardown asked to stop may take a moment to be gone.
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            allowed = self.allowed.union(*self.fixtures_hold.values())
            left = frozenset(
                holding for holding in holdings() - allowed if is_module_end or holding[0] not in BACKGROUND
            )
            is_settling = any(kind in BACKGROUND for kind, _ in left)  # state every test sees does not settle
            if not is_settling or time.monotonic() >= deadline:
                return left
            time.sleep(SETTLE_POLL_SECONDS)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(IsolationCheck(), "isolation-check")


@pytest.fixture(scope="module")
def live_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """pytest-django's live server, started for the module that asks for it and stopped at its end."""
    address = request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost"
    server = LiveServer(address)
    try:
        yield server
    finally:
        server.stop()
