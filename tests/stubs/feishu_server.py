"""A local Feishu Open API on 127.0.0.1 for tests, demos and the benchmark (F4).

Routes (reference doc §7): tenant_access_token/internal, bot/v3/info, im/v1/messages (create),
im/v1/messages/:id/reply, im/v1/messages/:id (get), im/v1/chats/:id (get: chat_set / DEFAULT_CHAT). Every request is recorded; errors can be injected
per route; a `uuid` already used returns the first message again and sends nothing, as Feishu does.
The real lark-oapi client talks to it through `settings.FEISHU_DOMAIN`.
"""

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
BOT_INFO_PATH = "/open-apis/bot/v3/info"
MESSAGES_PATH = "/open-apis/im/v1/messages"
CHATS_PATH = "/open-apis/im/v1/chats"


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    @property
    def route(self) -> str:
        return route_of(self.method, self.path)


@dataclass
class InjectedError:
    route: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    remaining: int = 1


def route_of(method: str, path: str) -> str:
    if path == TOKEN_PATH:
        return "token"
    if path == BOT_INFO_PATH:
        return "bot_info"
    if path == MESSAGES_PATH and method == "POST":
        return "create"
    if path.startswith(MESSAGES_PATH + "/") and path.endswith("/reply"):
        return "reply"
    if path.startswith(MESSAGES_PATH + "/") and method == "GET":
        return "get"
    if path.startswith(CHATS_PATH + "/") and method == "GET":
        return "chat_get"
    return "unknown"


class FeishuStub:
    """State behind the server; tests read `requests`, `sent` and `messages`, and call `fail_next`."""

    def __init__(self) -> None:
        self.url = ""  # set by the server that serves it
        self.lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.sent: list[dict[str, Any]] = []  # messages really posted (a repeated uuid posts nothing)
        self.messages: dict[str, dict[str, Any]] = {}  # message_id -> API-shaped message for GET
        self.bot_open_ids: dict[str, str] = {}  # app_id -> bot open_id
        self.errors: list[InjectedError] = []
        self.valid_tokens: dict[str, str] = {}  # token -> app_id
        self._uuids: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._token_ids = itertools.count(1)

    # --- test controls -------------------------------------------------------------------------------
    def fail_next(
        self, route: str, *, status: int, code: int, msg: str = "injected", headers: dict | None = None, times: int = 1
    ) -> None:
        with self.lock:
            self.errors.append(InjectedError(route, status, {"code": code, "msg": msg}, headers or {}, times))

    def expire_tokens(self) -> None:
        """Every issued tenant token becomes invalid (API calls answer 99991663)."""
        with self.lock:
            self.valid_tokens.clear()

    def add_message(
        self,
        *,
        message_id: str,
        text: str = "",
        msg_type: str = "text",
        content: dict[str, Any] | None = None,
        sender_id: str = "ou_user_1",
        sender_type: str = "user",
        chat_id: str = "oc_chat",
        root_id: str = "",
        parent_id: str = "",
        thread_id: str = "",
    ) -> None:
        body = content if content is not None else {"text": text}
        with self.lock:
            self.messages[message_id] = {
                "message_id": message_id,
                "root_id": root_id,
                "parent_id": parent_id,
                "thread_id": thread_id,
                "msg_type": msg_type,
                "chat_id": chat_id,
                "deleted": False,
                "updated": False,
                "sender": {
                    "id": sender_id,
                    "id_type": "app_id" if sender_type == "app" else "open_id",
                    "sender_type": sender_type,
                },
                "body": {"content": json.dumps(body, ensure_ascii=False)},
                "mentions": [],
            }

    def requests_to(self, route: str) -> list[RecordedRequest]:
        with self.lock:
            return [request for request in self.requests if request.route == route]

    # --- request handling ----------------------------------------------------------------------------
    def handle(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(request)
            route = request.route
            for error in self.errors:
                if error.route == route and error.remaining > 0:
                    error.remaining -= 1
                    return error.status, error.body, error.headers
            if route == "token":
                return self._token(request)
            app_id = self._authorised_app(request)
            if app_id is None:
                return 400, {"code": 99991663, "msg": "Invalid access token for authorization."}, {}
            if route == "bot_info":
                open_id = self.bot_open_ids.get(app_id, f"ou_bot_{app_id}")
                return 200, {"code": 0, "msg": "ok", "bot": {"open_id": open_id, "app_name": app_id}}, {}
            if route == "get":
                message_id = unquote(request.path.rsplit("/", 1)[1])
                message = self.messages.get(message_id)
                if message is None:
                    return 400, {"code": 230110, "msg": "message deleted or not found"}, {}
                return 200, {"code": 0, "msg": "success", "data": {"items": [message]}}, {}
            if route in ("reply", "create"):
                return self._send(request, route, app_id)
            if route == "chat_get":
                return self._chat_get(request)
            return 404, {"code": 404, "msg": "no such route in the stub"}, {}

    # --- im.v1.chat.get (G1): a chat's mode; `chats` holds what tests set, anything else is DEFAULT_CHAT ---------
    # The default is a topic group: the suite's seed flows (seed 002) are topic groups; ordinary-group tests say so
    # with chat_set(chat_id, chat_mode="group").
    DEFAULT_CHAT = {"chat_mode": "topic", "group_message_type": "thread"}

    def chat_set(
        self, chat_id: str, *, chat_mode: str = "group", group_message_type: str = "chat", name: str = ""
    ) -> None:
        with self.lock:
            self.__dict__.setdefault("chats", {})[chat_id] = {
                "chat_mode": chat_mode,
                "group_message_type": group_message_type,
                "name": name or chat_id,
            }

    def _chat_get(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        chat_id = unquote(request.path.rsplit("/", 1)[1])
        chat = self.__dict__.get("chats", {}).get(chat_id) or {**self.DEFAULT_CHAT, "name": chat_id}
        return 200, {"code": 0, "msg": "success", "data": dict(chat)}, {}

    def _token(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = request.body if isinstance(request.body, dict) else {}
        token = f"t-stub-{next(self._token_ids)}"
        self.valid_tokens[token] = str(body.get("app_id", ""))
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}, {}

    def _authorised_app(self, request: RecordedRequest) -> str | None:
        auth = request.headers.get("Authorization", "")
        return self.valid_tokens.get(auth.removeprefix("Bearer ").strip())

    def _send(self, request: RecordedRequest, route: str, app_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = request.body if isinstance(request.body, dict) else {}
        uuid = body.get("uuid") or ""
        if uuid and uuid in self._uuids:
            return 200, {"code": 0, "msg": "success", "data": self._uuids[uuid]}, {}
        message_id = f"om_stub_{next(self._ids)}"
        if route == "reply":
            parent_id = unquote(request.path.split("/")[-2])
            parent = self.messages.get(parent_id, {})
            root_id = parent.get("root_id") or parent_id
            chat_id = parent.get("chat_id", "")
            thread_id = parent.get("thread_id") or (f"omt_{root_id}" if body.get("reply_in_thread") else "")
        else:
            parent_id, root_id, thread_id = "", "", ""
            chat_id = str(body.get("receive_id", ""))
        data = {
            "message_id": message_id,
            "root_id": root_id,
            "parent_id": parent_id,
            "thread_id": thread_id,
            "msg_type": body.get("msg_type", "text"),
            "chat_id": chat_id,
            "sender": {"id": app_id, "id_type": "app_id", "sender_type": "app"},
            "body": {"content": body.get("content", "")},
        }
        self.messages[message_id] = {**data, "deleted": False, "updated": False, "mentions": []}
        if uuid:
            self._uuids[uuid] = data
        self.sent.append({"route": route, "app_id": app_id, "message_id": message_id, **body, "parent_id": parent_id})
        return 200, {"code": 0, "msg": "success", "data": data}, {}


class _Handler(BaseHTTPRequestHandler):
    stub: FeishuStub

    def _serve(self) -> None:
        parsed = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        request = RecordedRequest(self.command, parsed.path, parse_qs(parsed.query), dict(self.headers.items()), body)
        status, payload, headers = self.server.stub.handle(request)  # type: ignore[attr-defined]
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = _serve
    do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class FeishuStubServer:
    """`with FeishuStubServer() as server:` serves on 127.0.0.1:<free port>; `server.url` is the domain."""

    def __init__(self, stub: FeishuStub | None = None) -> None:
        self.stub = stub or FeishuStub()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.stub = self.stub  # type: ignore[attr-defined]
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FeishuStubServer":
        self.stub.url = self.url
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FeishuStub:
        self.start()
        return self.stub

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # a stand-alone local Feishu for demos: python -m tests.stubs.feishu_server
    import time

    server = FeishuStubServer().start()
    print(f"stub Feishu at {server.url} (set FEISHU_DOMAIN to it)", flush=True)
    while True:
        time.sleep(3600)
