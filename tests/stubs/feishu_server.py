"""A local Feishu Open API on 127.0.0.1 for tests, demos and the benchmark (F4).

Routes (reference doc §7): tenant_access_token/internal, bot/v3/info, im/v1/messages (create),
im/v1/messages/:id/reply, im/v1/messages/:id (get; a merge_forward added with `add_forward` answers its children
too, each with upper_message_id, as Feishu does), im/v1/chats/:id (get: chat_set / DEFAULT_CHAT), im/v1/messages/:id/reactions (add, delete),
im/v1/messages/:id/resources/:file_key (bytes registered with `add_resource`), im/v1/files (upload), CardKit cards (create,
element content, settings). Every request is recorded with its monotonic time and the status answered;
errors can be injected per route; a `uuid` already used returns the first message again and sends nothing,
as Feishu does. Rate limits like Feishu's (5 messages/s per chat, 50/s per app, 10 updates/s per card) answer
HTTP 429 + code 99991400 + `x-ogw-ratelimit-reset`. CardKit refuses a sequence not above the card's last
(300317) and an update once streaming is off (300309), which it turns off itself `streaming_limit_seconds`
after it was turned on, as Feishu does after 10 minutes. The real lark-oapi client talks to it through `settings.FEISHU_DOMAIN`.
im/v1/messages (list, issue 23's catch-up) lists what `add_message` added; `on_list` (a test's callable) runs
after each list request is answered and before the answer is sent, outside the stub's lock (it may make the hub
call this stub), so a test can make something happen between two pages.
"""

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from tests.stubs.http_server import StubHTTPServer

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
BOT_INFO_PATH = "/open-apis/bot/v3/info"
MESSAGES_PATH = "/open-apis/im/v1/messages"
CHATS_PATH = "/open-apis/im/v1/chats"
CARDS_PATH = "/open-apis/cardkit/v1/cards"
FILES_PATH = "/open-apis/im/v1/files"  # issue 25: im.v1.file.create (multipart upload), `files` holds them

RATE_LIMIT_CODE = 99991400
SEQUENCE_NOT_INCREASING_CODE = 300317
STREAMING_CLOSED_CODE = 300309  # Feishu's answer once streaming is off, by settings or its 10-minute limit
INVALID_CARD_CODE = 300100
CHAT_SENDS_PER_SECOND = 5
APP_SENDS_PER_SECOND = 50
CARD_UPDATES_PER_SECOND = 10
FEISHU_STREAMING_LIMIT_SECONDS = 10 * 60
SEND_ROUTES = frozenset({"create", "reply"})
CARD_UPDATE_ROUTES = frozenset({"card_content", "card_settings"})


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)  # when it arrived: tests count calls per second
    status: int = 0  # the HTTP status the stub answered
    code: int | None = None  # the Feishu code it answered

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
    parts = path.split("/")
    if path == CARDS_PATH and method == "POST":
        return "card_create"
    if path.startswith(CARDS_PATH + "/") and path.endswith("/content") and method == "PUT":
        return "card_content"
    if path.startswith(CARDS_PATH + "/") and path.endswith("/settings") and method == "PATCH":
        return "card_settings"
    if path.startswith(MESSAGES_PATH + "/") and "reactions" in parts:
        return "reaction_create" if method == "POST" else "reaction_delete" if method == "DELETE" else "unknown"
    if path.startswith(MESSAGES_PATH + "/") and "resources" in parts and method == "GET":
        return "resource"
    if path == FILES_PATH and method == "POST":
        return "file_create"
    if path.startswith("/open-apis/docx/v1/documents/") and path.endswith("/raw_content") and method == "GET":
        return "doc_raw_content"  # issue 26
    if path == "/open-apis/wiki/v2/spaces/get_node" and method == "GET":
        return "wiki_get_node"  # issue 26
    if path == TOKEN_PATH:
        return "token"
    if path == BOT_INFO_PATH:
        return "bot_info"
    if path == MESSAGES_PATH and method == "GET":
        return "list"  # im.v1.message.list (issue 23: catch-up)
    if path == MESSAGES_PATH and method == "POST":
        return "create"
    if path.startswith(MESSAGES_PATH + "/") and path.endswith("/reply"):
        return "reply"
    if path.startswith(MESSAGES_PATH + "/") and method == "GET":
        return "get"
    if path.startswith(MESSAGES_PATH + "/") and path.count("/") == MESSAGES_PATH.count("/") + 1 and method == "PATCH":
        return "message_patch"  # issue 26: an approval card shows its decision
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
        self.cards: dict[str, dict[str, Any]] = {}  # card_id -> {"card", "sequence", "streaming", ...}
        self.reactions: dict[str, dict[str, Any]] = {}  # reaction_id -> {"message_id", "emoji_type", ...}
        self.resources: dict[tuple[str, str], dict[str, Any]] = {}  # (message_id, file_key) -> bytes + headers
        self.rate_limits_enabled = True
        self.streaming_limit_seconds: float = FEISHU_STREAMING_LIMIT_SECONDS
        self._chat_sends: dict[str, deque[float]] = {}
        self._app_sends: dict[str, deque[float]] = {}
        self._card_updates: dict[str, deque[float]] = {}
        # issue 26 (H2): docx documents (id -> text, or None: the app may not read it) and wiki nodes (token -> node)
        self.documents: dict[str, str | None] = {}
        self.wiki_nodes: dict[str, dict[str, str]] = {}
        self.on_list: Callable[[RecordedRequest], None] | None = None  # see the module docstring
        self.listed_in: dict[str, str] = {}  # message_id -> the chat whose list holds it (add_message's listed_in)

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
        create_time_ms: int | None = None,
        mentions: list[dict[str, Any]] | None = None,
        listed_in: str = "",
    ) -> None:
        """`listed_in`: the chat whose message list holds it when that is not its own `chat_id` (an item claiming
        another chat than the one asked for, issue 35 U7)."""
        body = content if content is not None else {"text": text}
        with self.lock:
            if listed_in:
                self.listed_in[message_id] = listed_in
            self.messages[message_id] = {
                "create_time": str(create_time_ms if create_time_ms is not None else int(time.time() * 1000)),
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
                "mentions": mentions or [],  # the list API's shape: {"key", "id", "id_type", "name"}
            }

    def _list(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        """im.v1.message.list of a chat: its messages created within [start_time, end_time] (seconds), oldest
        first, `page_size` per page, the page token being the next index."""

        def arg(name: str, default: str = "") -> str:
            return (request.query.get(name) or [default])[0]

        start, end = int(arg("start_time", "0")) * 1000, int(arg("end_time", "9999999999")) * 1000 + 999
        items = sorted(  # called by handle(), which holds the lock
            (
                m
                for m in self.messages.values()
                if self.listed_in.get(m["message_id"], m.get("chat_id")) == arg("container_id")
                and start <= int(m.get("create_time") or 0) <= end
            ),
            key=lambda m: int(m.get("create_time") or 0),
        )
        first, size = int(arg("page_token", "0") or 0), int(arg("page_size", "20"))
        page = items[first : first + size]
        more = first + size < len(items)
        data = {"has_more": more, "page_token": str(first + size) if more else "", "items": page}
        return 200, {"code": 0, "msg": "success", "data": data}, {}

    def add_forward(self, *, message_id: str, children: list[dict[str, Any]], chat_id: str = "oc_chat") -> None:
        """A merge_forward and its children (`{"message_id", "text" | "msg_type" + "content", "sender_id"}`)."""
        self.add_message(
            message_id=message_id, msg_type="merge_forward", content={"content": "Merged and Forwarded Message"}
        )
        for child in children:
            self.add_message(
                message_id=child["message_id"],
                text=child.get("text", ""),
                msg_type=child.get("msg_type", "text"),
                content=child.get("content"),
                sender_id=child.get("sender_id", "ou_user_1"),
                chat_id=chat_id,
            )
            with self.lock:
                self.messages[child["message_id"]]["upper_message_id"] = message_id

    def add_resource(
        self,
        *,
        message_id: str,
        file_key: str,
        content: bytes,
        mime: str = "image/png",
        name: str = "",
        resource_type: str = "image",
        declare_length: bool = True,
    ) -> None:
        """Bytes `GET .../resources/:file_key?type=` serves; `declare_length=False` omits Content-Length."""
        with self.lock:
            self.resources[(message_id, file_key)] = {
                "content": content,
                "mime": mime,
                "name": name,
                "type": resource_type,
                "declare_length": declare_length,
                "bytes_written": 0,
            }

    def requests_to(self, route: str) -> list[RecordedRequest]:
        with self.lock:
            return [request for request in self.requests if request.route == route]

    def accepted(self, route: str) -> list[RecordedRequest]:
        """Requests to `route` the stub answered with success (status 200, code 0)."""
        return [request for request in self.requests_to(route) if request.status == 200 and request.code == 0]

    def card_text(self, card_id: str) -> str:
        """The card's markdown, element by element, as a person would read it."""
        with self.lock:
            if card_id not in self.cards:
                return ""
            elements = self.cards[card_id]["card"].get("body", {}).get("elements", [])
            return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")

    def message_text(self, sent: dict[str, Any]) -> str:
        """What a person reads in a message the stub posted: a text's text, a card's markdown (a CardKit card
        sent by reference is read as it shows now)."""
        try:
            content = json.loads(sent.get("content") or "{}")
        except ValueError:
            return ""
        if sent.get("msg_type") == "interactive":
            if content.get("type") == "card":
                return self.card_text(str((content.get("data") or {}).get("card_id") or ""))
            elements = (content.get("body") or {}).get("elements") or []
            return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")
        return str(content.get("text", ""))

    def sent_texts(self, *, app_id: str | None = None) -> list[str]:
        """The text of every message posted, in order (only `app_id`'s when given)."""
        return [self.message_text(sent) for sent in self.sent if app_id is None or sent["app_id"] == app_id]

    @staticmethod
    def max_per_second(requests: list[RecordedRequest]) -> int:
        """The most requests inside any one-second window (a sliding window over the recorded times)."""
        times = sorted(request.at for request in requests)
        best, start = 0, 0
        for end, at in enumerate(times):
            while at - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    # --- request handling ----------------------------------------------------------------------------
    def handle(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.requests.append(request)
            status, payload, headers = self._answer(request)
            request.status = status
            request.code = payload.get("code", 0) if isinstance(payload, dict) else 0
        if request.route == "list" and self.on_list is not None:
            self.on_list(request)
        return status, payload, headers

    def _answer(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
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
            children = [child for child in self.messages.values() if child.get("upper_message_id") == message_id]
            return 200, {"code": 0, "msg": "success", "data": {"items": [message, *children]}}, {}
        if route == "chat_get":
            return self._chat_get(request)
        if route == "list":
            return self._list(request)
        limited = self._rate_limited(request, route, app_id)
        if limited is not None:
            return limited
        if route in ("reply", "create"):
            return self._send(request, route, app_id)
        if route == "card_create":
            return self._card_create(request, app_id)
        if route == "card_content":
            return self._card_content(request)
        if route == "card_settings":
            return self._card_settings(request)
        if route == "reaction_create":
            return self._reaction_create(request, app_id)
        if route == "reaction_delete":
            return self._reaction_delete(request)
        if route == "message_patch":
            return self._message_patch(request)
        if route in ("doc_raw_content", "wiki_get_node"):
            return self._document_read(request, route)
        if route == "resource":
            return self._resource(request)
        if route == "file_create":
            return self._file_create(request, app_id)
        return 404, {"code": 404, "msg": "no such route in the stub"}, {}

    # --- rate limits (sliding one-second windows, like Feishu's per-chat / per-app / per-card limits) ---------
    def _rate_limited(
        self, request: RecordedRequest, route: str, app_id: str
    ) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        if not self.rate_limits_enabled:
            return None
        windows: list[tuple[deque[float], int]] = []
        if route in SEND_ROUTES:
            chat_id = self._chat_of(request, route)
            windows.append((self._chat_sends.setdefault(chat_id, deque()), CHAT_SENDS_PER_SECOND))
            windows.append((self._app_sends.setdefault(app_id, deque()), APP_SENDS_PER_SECOND))
        elif route in CARD_UPDATE_ROUTES:
            card_id = request.path.split("/")[5]
            windows.append((self._card_updates.setdefault(card_id, deque()), CARD_UPDATES_PER_SECOND))
        for window, limit in windows:
            while window and request.at - window[0] >= 1.0:
                window.popleft()
            if len(window) >= limit:
                reset = max(1, round(1.0 - (request.at - window[0]) + 0.5))
                body = {"code": RATE_LIMIT_CODE, "msg": "request trigger frequency limit"}
                return 429, body, {"x-ogw-ratelimit-limit": str(limit), "x-ogw-ratelimit-reset": str(reset)}
        for window, _limit in windows:
            window.append(request.at)
        return None

    def _chat_of(self, request: RecordedRequest, route: str) -> str:
        if route == "create":
            body = request.body if isinstance(request.body, dict) else {}
            return str(body.get("receive_id", ""))
        parent_id = unquote(request.path.split("/")[-2])
        return str(self.messages.get(parent_id, {}).get("chat_id") or f"chat-of-{parent_id}")

    # --- CardKit ---------------------------------------------------------------------------------------
    def _card_create(self, request: RecordedRequest, app_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = request.body if isinstance(request.body, dict) else {}
        try:
            card = json.loads(body.get("data") or "")
        except (TypeError, ValueError):
            card = None
        problem = card_json_problem(card) if body.get("type") == "card_json" else "type must be card_json"
        if problem:
            return 400, {"code": INVALID_CARD_CODE, "msg": f"invalid card: {problem}"}, {}
        card_id = f"7{next(self._ids):018d}"
        config = card.get("config") or {}
        self.cards[card_id] = {
            "card": card,
            "app_id": app_id,
            "sequence": 0,
            "streaming": bool(config.get("streaming_mode")),
            "streaming_since": request.at,
            "sent_in": [],
        }
        return 200, {"code": 0, "msg": "success", "data": {"card_id": card_id}}, {}

    def _card_for_update(
        self, request: RecordedRequest
    ) -> tuple[dict[str, Any] | None, tuple[int, dict[str, Any], dict[str, str]] | None]:
        card = self.cards.get(request.path.split("/")[5])
        body = request.body if isinstance(request.body, dict) else {}
        if card is None:
            return None, (400, {"code": 300101, "msg": "card not found"}, {})
        sequence = body.get("sequence")
        if not isinstance(sequence, int) or sequence <= card["sequence"]:
            return None, (400, {"code": SEQUENCE_NOT_INCREASING_CODE, "msg": "sequence number compare failed"}, {})
        return card, None

    def _card_content(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        card, refusal = self._card_for_update(request)
        if refusal is not None:
            return refusal
        assert card is not None
        if card["streaming"] and request.at - card["streaming_since"] > self.streaming_limit_seconds:
            card["streaming"] = False  # Feishu closes streaming mode on its own after the limit
            return 400, {"code": STREAMING_CLOSED_CODE, "msg": "streaming mode is closed (time limit)"}, {}
        if not card["streaming"]:
            return 400, {"code": STREAMING_CLOSED_CODE, "msg": "streaming mode is closed"}, {}
        element_id = unquote(request.path.split("/")[7])
        elements = card["card"].get("body", {}).get("elements", [])
        element = next((e for e in elements if e.get("element_id") == element_id), None)
        if element is None:
            return 400, {"code": 300102, "msg": "element not found"}, {}
        card["sequence"] = request.body["sequence"]
        element["content"] = str(request.body.get("content", ""))
        return 200, {"code": 0, "msg": "success", "data": {}}, {}

    def _card_settings(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        card, refusal = self._card_for_update(request)
        if refusal is not None:
            return refusal
        assert card is not None
        try:
            settings = json.loads(request.body.get("settings") or "")
        except (TypeError, ValueError):
            return 400, {"code": INVALID_CARD_CODE, "msg": "settings must be JSON"}, {}
        config = settings.get("config") or {}
        card["sequence"] = request.body["sequence"]
        if "streaming_mode" in config:
            card["streaming"] = bool(config["streaming_mode"])
            if card["streaming"]:
                card["streaming_since"] = request.at
        card["card"].setdefault("config", {}).update(config)
        return 200, {"code": 0, "msg": "success", "data": {}}, {}

    # --- reactions and resources -------------------------------------------------------------------------
    def _reaction_create(self, request: RecordedRequest, app_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = request.body if isinstance(request.body, dict) else {}
        emoji_type = (body.get("reaction_type") or {}).get("emoji_type") or ""
        if not emoji_type:
            return 400, {"code": 231001, "msg": "reaction type is invalid"}, {}
        message_id = unquote(request.path.split("/")[5])
        reaction_id = f"reaction_{next(self._ids)}"
        self.reactions[reaction_id] = {
            "message_id": message_id,
            "emoji_type": emoji_type,
            "app_id": app_id,
            "deleted": False,
        }
        data = {
            "reaction_id": reaction_id,
            "operator": {"operator_id": app_id, "operator_type": "app"},
            "action_time": str(int(time.time() * 1000)),
            "reaction_type": {"emoji_type": emoji_type},
        }
        return 200, {"code": 0, "msg": "success", "data": data}, {}

    def _reaction_delete(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        parts = request.path.split("/")
        message_id, reaction_id = unquote(parts[5]), unquote(parts[7])
        reaction = self.reactions.get(reaction_id)
        if reaction is None or reaction["message_id"] != message_id or reaction["deleted"]:
            return 400, {"code": 231003, "msg": "reaction not found"}, {}
        reaction["deleted"] = True
        data = {"reaction_id": reaction_id, "reaction_type": {"emoji_type": reaction["emoji_type"]}}
        return 200, {"code": 0, "msg": "success", "data": data}, {}

    def _resource(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        parts = request.path.split("/")
        resource = self.resources.get((unquote(parts[5]), unquote(parts[7])))
        wanted = (request.query.get("type") or [""])[0]
        if resource is None or resource["type"] != wanted:
            return 400, {"code": 234003, "msg": "file not found"}, {}
        headers = {"Content-Type": resource["mime"]}
        if resource["name"]:
            headers["Content-Disposition"] = f'attachment; filename="{resource["name"]}"'
        return 200, resource, headers

    # --- im.v1.file.create (issue 25: /context export): a multipart upload, kept by file_key --------------
    def _file_create(self, request: RecordedRequest, app_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        fields = multipart_fields(request)
        if not fields.get("file_name") or not fields.get("file_type") or "file" not in fields:
            return 400, {"code": 234001, "msg": "file_type, file_name and file are required"}, {}
        file_key = f"file_v2_stub_{next(self._ids)}"
        self.__dict__.setdefault("files", {})[file_key] = {**fields, "app_id": app_id}
        return 200, {"code": 0, "msg": "success", "data": {"file_key": file_key}}, {}

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
        if body.get("msg_type") == "interactive":
            problem = self._interactive_problem(body.get("content", ""), message_id)
            if problem:
                return 400, {"code": 230099, "msg": f"Failed to create card content: {problem}"}, {}
        self.messages[message_id] = {**data, "deleted": False, "updated": False, "mentions": []}
        if uuid:
            self._uuids[uuid] = data
        sent = {"route": route, "app_id": app_id, "message_id": message_id, **body, "parent_id": parent_id}
        if route == "create":  # to a chat (chat_id) or to a person directly (open_id)
            sent["receive_id_type"] = (request.query.get("receive_id_type") or [""])[0]
        self.sent.append(sent)
        return 200, {"code": 0, "msg": "success", "data": data}, {}

    # --- issue 26: docx raw_content and wiki get_node (H2) ----------------------------------------------------
    def _document_read(self, request: RecordedRequest, route: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        if route == "wiki_get_node":
            node = self.wiki_nodes.get((request.query.get("token") or [""])[0])
            if node is None:
                return 400, {"code": 131005, "msg": "not found"}, {}
            return 200, {"code": 0, "msg": "success", "data": {"node": node}}, {}
        document_id = unquote(request.path.split("/")[-2])
        if document_id not in self.documents:
            return 400, {"code": 1770002, "msg": "not found"}, {}
        text = self.documents[document_id]
        if text is None:
            return 403, {"code": 1770032, "msg": "forBidden"}, {}
        return 200, {"code": 0, "msg": "success", "data": {"content": text}}, {}

    # --- issue 26: im/v1/messages/:id PATCH (a sent card's content replaced) ---------------------------------
    def _message_patch(self, request: RecordedRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        message_id = unquote(request.path.split("/")[-1])
        message = self.messages.get(message_id)
        if message is None or message.get("msg_type") != "interactive":
            return 400, {"code": 230001, "msg": "message not found or not a card"}, {}
        content = (request.body or {}).get("content", "") if isinstance(request.body, dict) else ""
        try:
            problem = card_json_problem(json.loads(content))
        except (TypeError, ValueError):
            problem = "content is not JSON"
        if problem:
            return 400, {"code": 230099, "msg": f"Failed to update card content: {problem}"}, {}
        message["body"] = {"content": content}
        message["updated"] = True
        return 200, {"code": 0, "msg": "success", "data": {}}, {}

    def _interactive_problem(self, content: str, message_id: str) -> str:
        try:
            card = json.loads(content)
        except (TypeError, ValueError):
            return "content is not JSON"
        if isinstance(card, dict) and card.get("type") == "card":
            card_id = str((card.get("data") or {}).get("card_id") or "")
            if card_id not in self.cards:
                return "card_id not found"
            self.cards[card_id]["sent_in"].append(message_id)
            return ""
        return card_json_problem(card)


def multipart_fields(request: RecordedRequest) -> dict[str, str]:
    """The parts of a multipart/form-data body as name -> text (the handler decoded the body as text)."""
    content_type = next((v for k, v in request.headers.items() if k.lower() == "content-type"), "")
    boundary = content_type.partition("boundary=")[2].strip('"')
    if not boundary or not isinstance(request.body, str):
        return {}
    fields: dict[str, str] = {}
    for part in request.body.split("--" + boundary):
        head, _, value = part.partition("\r\n\r\n")
        name = head.partition('name="')[2].partition('"')[0]
        if name:
            fields[name] = value.removesuffix("\r\n")
    return fields


def card_json_problem(card: Any) -> str:
    """Why Feishu would refuse this card JSON 2.0 ("" when it is valid): what the stub checks."""
    if not isinstance(card, dict):
        return "card must be a JSON object"
    if card.get("schema") != "2.0":
        return "schema must be 2.0"
    elements = (card.get("body") or {}).get("elements")
    if not isinstance(elements, list) or not elements:
        return "body.elements must be a non-empty list"
    seen: set[str] = set()
    for element in elements:
        if not isinstance(element, dict) or not element.get("tag"):
            return "every element needs a tag"
        if element["tag"] == "markdown" and not isinstance(element.get("content"), str):
            return "a markdown element needs string content"
        element_id = element.get("element_id")
        if element_id is not None:
            if not isinstance(element_id, str) or not element_id or len(element_id) > 20 or element_id in seen:
                return "element_id must be unique, 1-20 characters"
            seen.add(element_id)
    if len(json.dumps(card, ensure_ascii=False).encode()) > 30 * 1024:
        return "card is larger than 30 KB"
    return ""


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
        stub = self.server.stub  # type: ignore[attr-defined]
        status, payload, headers = stub.handle(request)
        if isinstance(payload, dict) and "content" in payload and isinstance(payload["content"], bytes):
            self._serve_bytes(stub, payload, headers)
            return
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _serve_bytes(self, stub: FeishuStub, resource: dict[str, Any], headers: dict[str, str]) -> None:
        """A resource in 64 KiB writes, counting what was written: a client that stops reading stops it."""
        content: bytes = resource["content"]
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        if resource["declare_length"]:
            self.send_header("Content-Length", str(len(content)))
        else:
            self.close_connection = True  # no length: the end of the body is the end of the connection
        self.end_headers()
        try:
            for start in range(0, len(content), 64 * 1024):
                self.wfile.write(content[start : start + 64 * 1024])
                with stub.lock:
                    resource["bytes_written"] += len(content[start : start + 64 * 1024])
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_PATCH = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class FeishuStubServer:
    """`with FeishuStubServer() as server:` serves on 127.0.0.1:<free port>; `server.url` is the domain."""

    def __init__(self, stub: FeishuStub | None = None) -> None:
        self.stub = stub or FeishuStub()
        self._server = StubHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.stub = self.stub  # type: ignore[attr-defined]
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
