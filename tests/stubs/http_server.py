"""The stub servers' HTTP server: closing it also ends the connections it still serves.

The invariant: once `server_close()` returns, no handler thread of the server is left (tests/isolation.py counts
one as left behind). The standard library's server stops accepting, but a keep-alive connection that a client
pools (the LLM SDKs' and the Feishu client's HTTP pools do) keeps its handler thread waiting for a next request
for as long as that client lives. So the open connections are shut down, which ends each handler's wait, and
their threads are joined.
"""

import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Any

# A handler still writing (a slow stream) or waiting on its test gets this long once its connection is shut.
HANDLER_JOIN_SECONDS = 5.0


class StubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # joined below, with a bound: a handler stuck in a test's callback never hangs the run

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handlers: dict[socket.socket, threading.Thread] = {}
        self._handlers_lock = threading.Lock()
        self._is_closed = False

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._handlers_lock:
            self._handlers[request] = threading.current_thread()
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._handlers_lock:
                self._handlers.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not self._is_closed:  # after the close, a handler's failed write is the close, not a stub's bug
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        self._is_closed = True
        super().server_close()
        with self._handlers_lock:
            handlers = list(self._handlers.items())
        for connection, _ in handlers:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # the handler's read returns end of file, its write fails
            except OSError:
                pass  # the client closed it first
        for _, thread in handlers:
            thread.join(timeout=HANDLER_JOIN_SECONDS)
