"""A local Feishu long-connection endpoint on 127.0.0.1 for tests and the benchmark (G6).

What the real SDK (`lark_oapi.ws.Client`) talks to, read from lark_oapi/ws/client.py:
- `POST <domain>/callback/ws/endpoint` with `{"AppID", "AppSecret"}` answers
  `{"code": 0, "data": {"URL": "ws://...?device_id=..&service_id=..", "ClientConfig": {...}}}`; ClientConfig's
  ReconnectNonce/ReconnectInterval/PingInterval (seconds) replace the SDK's 30/120/120, so tests set them short.
  A wrong secret answers a non-zero code (the SDK raises ClientException and does not retry).
- the websocket carries `lark_oapi.ws.pb.pbbp2_pb2.Frame`s: the server pushes DATA frames (method 1) with
  headers type=event, message_id, sum=1, seq=0, trace_id and the event JSON as payload (plain: the socket is
  the authentication, the SDK decrypts nothing here); the client answers each with the same frame whose payload
  is `{"code": 200, ...}` (500 when its handler raised). The client pings with CONTROL frames (method 0).

Like Feishu, an event pushed but not acknowledged when the connection drops is pushed again on the next
connection, and one acknowledged with an error (500: the handler raised) is pushed again after
`redeliver_after_seconds`; `redeliver()` pushes an acknowledged one again (Feishu's redelivery after a lost ack).
An event pushed while no connection hears it (none up, or a silent one) waits for the next connection, unless
`keeps_undelivered` is False: then it is gone, as issue 23 describes the long connection (no redelivery of what
was never delivered), and only the hub's catch-up can find it.

Two ways to refuse a reconnect: `refuse_reconnects(n)` answers the endpoint lookup "system busy" (a fresh client
has then not heard the ClientConfig yet and waits the SDK's own defaults, up to 30 s jitter and 120 s between
tries), `refuse_handshakes(n)` answers the websocket upgrade 503 with Feishu's handshake headers (the lookup
succeeded, so the client retries at the configured ReconnectInterval).
"""

import asyncio
import base64
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import websockets
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.asyncio.server import ServerConnection, serve

ENDPOINT_PATH = "/callback/ws/endpoint"
SYSTEM_BUSY_CODE = 1  # lark_oapi.ws.const.SYSTEM_BUSY
FRAME_CONTROL = 0
FRAME_DATA = 1


@dataclass
class PushedEvent:
    frame_id: str
    payload: dict[str, Any]
    pushed_at: list[float] = field(default_factory=list)  # perf_counter of every push (re-pushes included)
    ack_codes: list[int] = field(default_factory=list)
    acked_at: float | None = None
    ack_data: list[Any] = field(default_factory=list)  # issue 26: what the client answered (a card press's toast)


def _event_frame(*, frame_id: str, seq_id: int, payload: dict[str, Any]) -> bytes:
    frame = Frame()
    frame.SeqID = seq_id
    frame.LogID = seq_id
    frame.service = 1
    frame.method = FRAME_DATA
    for key, value in (("type", "event"), ("message_id", frame_id), ("sum", "1"), ("seq", "0"), ("trace_id", frame_id)):
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = json.dumps(payload).encode()
    return frame.SerializeToString()


def _pong_frame(ping: Frame) -> bytes:
    frame = Frame()
    frame.SeqID, frame.LogID, frame.service, frame.method = 0, 0, ping.service, FRAME_CONTROL
    header = frame.headers.add()
    header.key, header.value = "type", "pong"
    return frame.SerializeToString()


class FeishuWsStub:
    """Endpoint lookup (HTTP) and websocket, each on its own 127.0.0.1 port; thread-safe controls for tests."""

    def __init__(
        self,
        *,
        app_secrets: dict[str, str] | None = None,
        reconnect_nonce: int = 0,
        reconnect_interval: int = 1,
        ping_interval: int = 120,
        redeliver_after_seconds: float = 0.5,
    ) -> None:
        self.redeliver_after_seconds = redeliver_after_seconds
        self.app_secrets = dict(app_secrets or {})  # app_id -> secret; an unknown app id is refused
        self.client_config = {
            "ReconnectCount": -1,
            "ReconnectInterval": reconnect_interval,
            "ReconnectNonce": reconnect_nonce,
            "PingInterval": ping_interval,
        }
        self.events: dict[str, PushedEvent] = {}
        self.endpoint_requests: list[dict[str, Any]] = []
        self.connections_accepted = 0
        self._lock = threading.Condition()
        self._ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="feishu-ws-stub", daemon=True)
        self._connection: ServerConnection | None = None
        self._silent: ServerConnection | None = None  # go_silent(): this connection hears and says nothing
        self.refuse_endpoints = 0  # refuse_reconnects(n): the next n endpoint lookups answer "system busy"
        self.refuse_upgrades = 0  # refuse_handshakes(n): the next n websocket upgrades answer 503
        self.handshakes_refused = 0
        self.keeps_undelivered = True  # False: an event no connection heard is gone (see the module docstring)
        self.undelivered_dropped: list[str] = []  # frame ids of the events that went
        self._unsent: list[str] = []  # frame ids to push on the next connection
        self._ws_server = None
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._http_handler())
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="feishu-ws-endpoint", daemon=True)

    # --- lifecycle --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The domain the SDK asks for its endpoint (FEISHU_LONG_CONNECTION_DOMAIN)."""
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> "FeishuWsStub":
        self._thread.start()
        self._ws_server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

        async def close() -> None:
            if self._silent is not None:
                self._silent.transport.abort()  # reading is paused: it would never finish a close handshake
            self._ws_server.close()
            if self._connection is not None:
                await self._connection.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _serve(self):
        return await serve(self._on_connection, "127.0.0.1", 0, process_request=self._upgrade_refused)

    def _upgrade_refused(self, connection: ServerConnection, request: Any) -> Any:
        with self._lock:
            if self.refuse_upgrades <= 0:
                return None  # the handshake goes on
            self.refuse_upgrades -= 1
            self.handshakes_refused += 1
        response = connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "system busy\n")
        # What the SDK reads from a refused upgrade (lark_oapi/ws/client.py, _parse_ws_conn_exception): a status
        # other than 403 and 514 is a ServerException, which it retries.
        response.headers["handshake-status"] = str(SYSTEM_BUSY_CODE)
        response.headers["handshake-msg"] = "system busy"
        return response

    @property
    def ws_port(self) -> int:
        return self._ws_server.sockets[0].getsockname()[1]

    # --- test controls ----------------------------------------------------------------------------------------
    def push(self, payload: dict[str, Any]) -> str:
        """Push one event now (or on the next connection when none is up); returns its frame id."""
        frame_id = f"frame-{next(self._ids)}"
        with self._lock:
            self.events[frame_id] = PushedEvent(frame_id=frame_id, payload=payload)
        asyncio.run_coroutine_threadsafe(self._push(frame_id), self._loop).result(timeout=10)
        return frame_id

    def redeliver(self, frame_id: str) -> None:
        """Push an already acknowledged event again, as Feishu does when it did not see the ack."""
        asyncio.run_coroutine_threadsafe(self._push(frame_id), self._loop).result(timeout=10)

    def drop(self) -> None:
        """Close the current connection abruptly (no close handshake), as a network failure would."""

        async def drop() -> None:
            if self._connection is not None:
                self._connection.transport.abort()

        asyncio.run_coroutine_threadsafe(drop(), self._loop).result(timeout=10)

    def go_silent(self) -> None:
        """The connection stays open but goes deaf and dumb: no frame is read (no ping answered, not even the
        websocket's own) and none is pushed; events pushed meanwhile wait for the next connection, as Feishu
        keeps what it could not deliver. A new connection is served normally."""

        async def silence() -> None:
            self._silent = self._connection
            if self._connection is not None:
                self._connection.transport.pause_reading()

        asyncio.run_coroutine_threadsafe(silence(), self._loop).result(timeout=10)

    def refuse_reconnects(self, count: int) -> None:
        """Answer the next `count` endpoint lookups with "system busy" (the SDK retries those, up to its
        ReconnectCount: set client_config["ReconnectCount"] to make it give up)."""
        with self._lock:
            self.refuse_endpoints = count

    def refuse_handshakes(self, count: int) -> None:
        """Answer the next `count` websocket upgrades with 503 and Feishu's "system busy" handshake headers (the
        endpoint lookup before each succeeds, so the SDK retries at the configured ReconnectInterval)."""
        with self._lock:
            self.refuse_upgrades = count

    def wait_connections(self, count: int, *, timeout: float = 10.0) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self.connections_accepted >= count and self._connection, timeout):
                raise TimeoutError(f"{self.connections_accepted} connection(s), wanted {count}")

    def wait_acked(self, frame_ids: list[str] | None = None, *, timeout: float = 10.0) -> None:
        def done() -> bool:
            wanted = frame_ids if frame_ids is not None else list(self.events)
            return all(self.events[frame_id].acked_at is not None for frame_id in wanted)

        with self._lock:
            if not self._lock.wait_for(done, timeout):
                missing = [f for f in (frame_ids or self.events) if self.events[f].acked_at is None]
                raise TimeoutError(f"not acknowledged: {missing[:5]} ({len(missing)})")

    def is_connected(self) -> bool:
        with self._lock:
            return self._connection is not None

    # --- server side ------------------------------------------------------------------------------------------
    async def _push(self, frame_id: str) -> None:
        connection = self._connection
        event = self.events[frame_id]
        if connection is None or connection is self._silent:
            self._undelivered(frame_id)
            return
        with self._lock:
            event.pushed_at.append(time.perf_counter())
        try:
            await connection.send(_event_frame(frame_id=frame_id, seq_id=len(self.events), payload=event.payload))
        except websockets.ConnectionClosed:
            self._undelivered(frame_id)

    def _undelivered(self, frame_id: str) -> None:
        with self._lock:
            if self.keeps_undelivered:
                self._unsent.append(frame_id)
            else:
                self.undelivered_dropped.append(frame_id)

    async def _on_connection(self, connection: ServerConnection) -> None:
        with self._lock:
            self._connection = connection
            self.connections_accepted += 1
            # Feishu pushes again what was never acknowledged on the dropped connection.
            pending = self._unsent + [
                f for f, e in self.events.items() if e.acked_at is None and e.pushed_at and f not in self._unsent
            ]
            self._unsent = []
            self._lock.notify_all()
        for frame_id in pending:
            await self._push(frame_id)
        try:
            async for message in connection:
                frame = Frame()
                frame.ParseFromString(message)
                if frame.method == FRAME_CONTROL:
                    await connection.send(_pong_frame(frame))
                    continue
                headers = {header.key: header.value for header in frame.headers}
                answered = json.loads(frame.payload or b"{}")
                code = answered.get("code", 0)
                with self._lock:
                    event = self.events.get(headers.get("message_id", ""))
                    if event is not None:
                        event.ack_codes.append(code)
                        if answered.get("data"):
                            event.ack_data.append(json.loads(base64.b64decode(answered["data"])))
                        if code == 200 and event.acked_at is None:
                            event.acked_at = time.perf_counter()
                    self._lock.notify_all()
                if event is not None and code != 200 and event.acked_at is None:
                    # Feishu pushes an event again when its handler answered an error.
                    self._loop.call_later(
                        self.redeliver_after_seconds, lambda f=event.frame_id: asyncio.ensure_future(self._push(f))
                    )
        except websockets.ConnectionClosed:
            pass
        finally:
            with self._lock:
                if self._connection is connection:
                    self._connection = None
                self._lock.notify_all()

    def _refusing(self) -> bool:
        with self._lock:
            if self.refuse_endpoints <= 0:
                return False
            self.refuse_endpoints -= 1
            return True

    def _http_handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                app_id = body.get("AppID", "")
                with stub._lock:
                    stub.endpoint_requests.append({"path": self.path, "app_id": app_id})
                if self.path != ENDPOINT_PATH:
                    answer: dict[str, Any] = {"code": 404, "msg": "not found"}
                elif stub.app_secrets.get(app_id) != body.get("AppSecret"):
                    answer = {"code": 1000040345, "msg": "app_id or app_secret invalid"}  # a ClientException
                elif stub._refusing():
                    answer = {"code": 1, "msg": "system busy"}  # a ServerException: the SDK retries
                else:
                    device = next(stub._ids)
                    answer = {
                        "code": 0,
                        "msg": "ok",
                        "data": {
                            "URL": f"ws://127.0.0.1:{stub.ws_port}/ws/v2?device_id=d{device}&service_id=1",
                            "ClientConfig": stub.client_config,
                        },
                    }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
                pass

        return Handler

    def __enter__(self) -> "FeishuWsStub":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
