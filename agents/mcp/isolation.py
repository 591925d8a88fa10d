"""What a stdio MCP server gets from the hub: as little as possible (issue 30, finding 3).

A stdio server is a program the hub starts on its own host, as its own user. It gets its configured environment
plus PATH, HOME and the locale, never the hub's environment (SECRET_KEY, database URLs, provider keys). The hub's
processes also mark themselves non-dumpable at start: Linux then refuses another process of the same user
(without CAP_SYS_PTRACE, which root has) to read /proc/<hub pid>/environ or its memory, where the hub's
environment still is. Neither is a sandbox: the server can still read the files the hub's user can. docs/tools.md
says how to isolate one (a separate user, a container, or an HTTP server).
"""

import ctypes
import ctypes.util
import logging
import os
import sys
from collections.abc import Iterable

logger = logging.getLogger(__name__)

# What a program needs to find its interpreter and its files and to print text: nothing of the hub's own.
INHERITED_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE")
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def stdio_environment(*, configured: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The environment a stdio server starts with: the inherited variables that are set, then its own."""
    inherited = {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}
    return inherited | dict(configured)


def _prctl(option: int, value: int = 0) -> int:
    if not sys.platform.startswith("linux"):
        return -1
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def process_environment_hide() -> bool:
    """Mark this process non-dumpable (Linux): its /proc environ and memory become unreadable to the servers it
    starts (and their children inherit nothing of it). True when the flag is set."""
    if _prctl(PR_SET_DUMPABLE, 0) != 0:
        logger.warning("could not mark the process non-dumpable", extra={"platform": sys.platform})
        return False
    return True


def process_is_dumpable() -> bool:
    return _prctl(PR_GET_DUMPABLE) != 0
