"""Outbound Feishu calls through lark-oapi: one client per bot, errors as values turned into our exceptions.

Messages (text, post, interactive: a card JSON or a CardKit card reference), CardKit cards (create, element
content, settings), reactions and message resources all go through `feishu_call`; the SDK's typed requests
are used everywhere except the resource download, which streams so an over-size file is refused unread.

The SDK neither retries nor refreshes an expired token (reference doc §4.1); `feishu_call` does both:
rate limits (99991400 / HTTP 429 with `x-ogw-ratelimit-reset`, 230020) wait and retry, 99991663 / 99991661
drop the cached tenant token and retry once (F3). The domain is `settings.FEISHU_DOMAIN` (F4).

A send passes `budget` (R4, feishu/outbound/budget.py): `feishu_call` takes it right before each
request leaves, after the bot's client is built and its tenant token is in the SDK's cache, and again before
a resend after a rate-limit answer. A token taken earlier would let the request reach Feishu up to a token
fetch later (a second under load), inside the next sender's slot: a sixth send in Feishu's second.
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from django.conf import settings

from agents.models import Bot
from feishu.outbound.budget import send_budget_acquire
from feishu.outbound.sandbox import MESSAGE_NOT_FOUND_CODE, SANDBOX_DOMAIN, sandbox_transport_install
from feishu.outbound.sdk import (
    AccessTokenType,
    BaseRequest,
    CardkitService,
    Config,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetChatRequest,
    GetMessageRequest,
    HttpMethod,
    ImService,
    LogLevel,
    ObtainAccessTokenException,
    RawResponse,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
    RequestOption,
    SettingsCardRequest,
    SettingsCardRequestBody,
    TokenManager,
    Transport,
    domain_is_origin,
    request_token_add,
    sdk_logger,
)

# Every lark client of ours goes through the sandbox check (a sandbox bot's calls never leave the machine).
sandbox_transport_install()

logger = logging.getLogger(__name__)

RATE_LIMIT_CODES = frozenset({99991400, 230020, 11232, 11233, 1000004, 1000005})
TOKEN_EXPIRED_CODES = frozenset({99991663, 99991661})
MAX_CALL_ATTEMPTS = 4
# A rate-limit wait is capped so one worker is never parked for a whole minute; the task retries later.
MAX_RATE_LIMIT_WAIT_SECONDS = 10.0
DEFAULT_RATE_LIMIT_WAIT_SECONDS = 1.0
CLIENT_TIMEOUT_SECONDS = 10.0

# Feishu's resource download: the SDK reads the whole body into memory, so this one call streams by hand.
MESSAGE_RESOURCE_PATH = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
MESSAGE_RESOURCE_CHUNK_BYTES = 64 * 1024
MESSAGE_RESOURCE_TOO_LARGE_CODE = -413  # ours, not Feishu's: the file is larger than the caller accepts


class FeishuClient:
    """What `lark.Client.builder()...build()` sets up, for the two services the bridge calls: the config (app,
    secret, domain, timeout, log level), `im` and `cardkit`, and a raw request through the same token check and
    transport. `lark_oapi.client` would import all ~60 services of the SDK (feishu/outbound/sdk.py); the services
    are the SDK's own, so every request is the one lark.Client would send. The tenant token cache is the SDK's
    process-wide `TokenManager.cache`, as with lark.Client."""

    def __init__(self, *, app_id: str, app_secret: str, domain: str, timeout_seconds: float) -> None:
        if not domain_is_origin(domain):  # the builder's check: a request carries the app secret to this host
            raise ValueError(f"domain must be an https origin (got {domain!r})")
        config = Config()
        config.app_id = app_id
        config.app_secret = app_secret
        config.domain = domain
        config.timeout = timeout_seconds
        config.log_level = LogLevel.CRITICAL  # feishu_call logs every failure itself, structured
        sdk_logger.setLevel(int(config.log_level.value))  # the SDK's one logger, as its builder sets it
        self.config = config
        self.im = ImService(config)
        self.cardkit = CardkitService(config)

    def request(self, request: BaseRequest) -> RawResponse:
        """A request the SDK has no typed call for: its access token added, sent by the SDK's transport."""
        option = RequestOption()
        request_token_add(self.config, request, option)
        return Transport.execute(self.config, request, option)


# One client per bot (issue 9.11): the entry is replaced when the bot's credentials or the domain change,
# never added beside the old one, so saving a bot a thousand times keeps one client.
_clients: dict[int, tuple[tuple[str, str, str], FeishuClient]] = {}
_clients_lock = threading.Lock()


class FeishuApiError(Exception):
    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status

    @property
    def is_rate_limited(self) -> bool:
        return self.code in RATE_LIMIT_CODES or self.http_status == 429

    @property
    def is_retryable(self) -> bool:
        """A later try may succeed: rate limits, transport failures (no code), Feishu's own 5xx."""
        return self.is_rate_limited or self.code is None or (self.http_status or 0) >= 500


@dataclass(frozen=True)
class SendBudget:
    """Which send budget a call takes (R4): the chat's and the app's; chat_id "" takes only the app's (a
    CardKit card create, which posts nothing in a chat).

    `first_taken`: the first request's send is already paid for (`send_budget_try` for an intermediate card
    update, which is skipped rather than delayed; a card close that follows the final update on its send);
    a resend after a rate-limit answer still takes its own."""

    chat_id: str
    first_taken: bool = False

    def take(self, *, bot: Bot, sleep: Callable[[float], None], resend: bool) -> None:
        if self.first_taken and not resend:
            return
        send_budget_acquire(chat_id=self.chat_id, app_id=bot.feishu_app_id, sleep=sleep)


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    thread_id: str = ""


@dataclass(frozen=True)
class FetchedMessage:
    """One message read back with im.v1.message.get (API shape: msg_type, body.content, string mention ids)."""

    message_id: str
    msg_type: str
    content: dict[str, Any]
    sender_id: str = ""
    sender_type: str = ""
    root_id: str = ""
    parent_id: str = ""
    thread_id: str = ""
    mentions: list[dict[str, Any]] = field(default_factory=list)
    upper_message_id: str = ""  # a merge_forward's child: the forward it belongs to


@dataclass(frozen=True)
class MessageResource:
    """A message's image or file, read at turn time (G7); never stored as bytes."""

    content: bytes
    name: str
    mime: str


def lark_client_get(*, bot: Bot) -> FeishuClient:
    # A sandbox bot's client has the sandbox domain: the transport answers it locally (feishu/outbound/sandbox.py).
    domain = SANDBOX_DOMAIN if bot.is_sandbox else settings.FEISHU_DOMAIN
    app_id = bot.bridge_id if bot.is_sandbox else bot.feishu_app_id
    fingerprint = (app_id, bot.feishu_app_secret, domain)
    entry = _clients.get(bot.pk)
    if entry is not None and entry[0] == fingerprint:
        return entry[1]
    with _clients_lock:
        client = FeishuClient(
            app_id=app_id, app_secret=bot.feishu_app_secret, domain=domain, timeout_seconds=CLIENT_TIMEOUT_SECONDS
        )
        _clients[bot.pk] = (fingerprint, client)
    return client


def bot_ready(*, bot: Bot) -> FeishuClient:
    """The bot's client, with its tenant token in the SDK's cache (fetched now if absent or expired), so the
    request that follows leaves at once. A failed fetch is left to the request itself, which fetches again
    and answers it as `feishu_call` knows (transport error, token codes)."""
    client = lark_client_get(bot=bot)
    try:
        TokenManager.get_self_tenant_token(client.config)
    except (ObtainAccessTokenException, OSError, ValueError):
        logger.info("feishu tenant token not fetched ahead of the call", extra={"bot": bot.slug})
    return client


def tenant_token_forget(*, bot: Bot) -> None:
    """Drop the SDK's process-wide cached tenant token so the next call fetches a fresh one."""
    cache = TokenManager.cache
    key = f"self_tenant_token:{bot.feishu_app_id}"
    store = getattr(cache, "cache", None)
    if isinstance(store, dict):
        store.pop(key, None)
    else:  # another ICache: expire the entry
        cache.set(key, "", 0)


def _response_error(response: Any) -> FeishuApiError:
    raw = getattr(response, "raw", None)
    return FeishuApiError(
        str(getattr(response, "msg", "") or "feishu call failed"),
        code=getattr(response, "code", None),
        http_status=getattr(raw, "status_code", None),
    )


def _rate_limit_wait(response: Any) -> float:
    raw = getattr(response, "raw", None)
    headers = getattr(raw, "headers", None) or {}
    value = None
    for name, header_value in headers.items():
        if name.lower() == "x-ogw-ratelimit-reset":
            value = header_value
    try:
        wait = float(value) if value is not None else DEFAULT_RATE_LIMIT_WAIT_SECONDS
    except ValueError:
        wait = DEFAULT_RATE_LIMIT_WAIT_SECONDS
    return max(0.0, min(wait, MAX_RATE_LIMIT_WAIT_SECONDS))


def feishu_call(
    *,
    bot: Bot,
    operation: str,
    call: Callable[[FeishuClient], Any],
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> Any:
    """Run one SDK call with the bridge's retry policy; returns the successful response or raises.

    With `budget`, every request (the first and each resend) takes one send from it just before it leaves."""
    sleep = sleep or time.sleep  # resolved per call so tests can patch time.sleep
    token_refreshed = False
    last_error: FeishuApiError | None = None
    for attempt in range(1, MAX_CALL_ATTEMPTS + 1):
        try:
            if budget is None:
                client = lark_client_get(bot=bot)
            else:
                client = bot_ready(bot=bot)
                budget.take(bot=bot, sleep=sleep, resend=attempt > 1)
            response = call(client)
        except (OSError, ValueError) as error:  # connection refused, non-JSON body (HTML 502)
            last_error = FeishuApiError(f"{type(error).__name__}: {error}"[:300])
            logger.warning(
                "feishu call transport error", extra={"bot": bot.slug, "operation": operation, "attempt": attempt}
            )
            sleep(DEFAULT_RATE_LIMIT_WAIT_SECONDS)
            continue
        if response.success():
            return response
        last_error = _response_error(response)
        if last_error.is_rate_limited:
            wait = _rate_limit_wait(response)
            logger.warning(
                "feishu rate limited",
                extra={"bot": bot.slug, "operation": operation, "code": last_error.code, "wait_seconds": wait},
            )
            sleep(wait)
            continue
        if last_error.code in TOKEN_EXPIRED_CODES and not token_refreshed:
            logger.info("feishu token expired, refreshing", extra={"bot": bot.slug, "operation": operation})
            tenant_token_forget(bot=bot)
            token_refreshed = True
            continue
        break
    assert last_error is not None
    logger.warning(
        "feishu call failed",
        extra={"bot": bot.slug, "operation": operation, "code": last_error.code, "http_status": last_error.http_status},
    )
    raise last_error


def card_reference(card_id: str) -> dict[str, Any]:
    """The `interactive` content that sends an existing CardKit card (what streaming updates then change)."""
    return {"type": "card", "data": {"card_id": card_id}}


def message_reply_content(
    *,
    bot: Bot,
    message_id: str,
    msg_type: str,
    content: dict[str, Any],
    uuid: str,
    reply_in_thread: bool,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    """Reply with any msg_type: text `{"text"}`, post `{"zh_cn": ...}`, interactive (card JSON or reference)."""
    body = (
        ReplyMessageRequestBody.builder()
        .content(json.dumps(content, ensure_ascii=False))
        .msg_type(msg_type)
        .reply_in_thread(reply_in_thread)
        .uuid(uuid)
        .build()
    )
    request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
    response = feishu_call(
        bot=bot, operation="message.reply", call=lambda c: c.im.v1.message.reply(request), sleep=sleep, budget=budget
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def message_create_content(
    *,
    bot: Bot,
    chat_id: str,
    msg_type: str,
    content: dict[str, Any],
    uuid: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    body = (
        CreateMessageRequestBody.builder()
        .receive_id(chat_id)
        .msg_type(msg_type)
        .content(json.dumps(content, ensure_ascii=False))
        .uuid(uuid)
        .build()
    )
    request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
    response = feishu_call(
        bot=bot, operation="message.create", call=lambda c: c.im.v1.message.create(request), sleep=sleep, budget=budget
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def message_reply(
    *,
    bot: Bot,
    message_id: str,
    text: str,
    uuid: str,
    reply_in_thread: bool,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    return message_reply_content(
        bot=bot,
        message_id=message_id,
        msg_type="text",
        content={"text": text},
        uuid=uuid,
        reply_in_thread=reply_in_thread,
        sleep=sleep,
        budget=budget,
    )


def message_create(
    *,
    bot: Bot,
    chat_id: str,
    text: str,
    uuid: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    return message_create_content(
        bot=bot, chat_id=chat_id, msg_type="text", content={"text": text}, uuid=uuid, sleep=sleep, budget=budget
    )


def card_create(
    *, bot: Bot, card: dict[str, Any], sleep: Callable[[float], None] | None = None, budget: SendBudget | None = None
) -> str:
    """CardKit `card.create` of a JSON 2.0 card (streaming_mode in its config) -> card_id."""
    body = CreateCardRequestBody.builder().type("card_json").data(json.dumps(card, ensure_ascii=False)).build()
    request = CreateCardRequest.builder().request_body(body).build()
    response = feishu_call(
        bot=bot, operation="card.create", call=lambda c: c.cardkit.v1.card.create(request), sleep=sleep, budget=budget
    )
    return str(response.data.card_id or "")


def card_element_content_update(
    *,
    bot: Bot,
    card_id: str,
    element_id: str,
    content: str,
    sequence: int,
    uuid: str = "",
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    """The streaming update: the element's full text; Feishu refuses a sequence not above the card's last."""
    builder = ContentCardElementRequestBody.builder().content(content).sequence(sequence)
    if uuid:
        builder = builder.uuid(uuid)
    request = (
        ContentCardElementRequest.builder()
        .card_id(card_id)
        .element_id(element_id)
        .request_body(builder.build())
        .build()
    )
    feishu_call(
        bot=bot,
        operation="card.element.content",
        call=lambda c: c.cardkit.v1.card_element.content(request),
        sleep=sleep,
        budget=budget,
    )


def card_settings_update(
    *,
    bot: Bot,
    card_id: str,
    settings: dict[str, Any],
    sequence: int,
    uuid: str = "",
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    """CardKit `card.settings`, e.g. `{"config": {"streaming_mode": False, "summary": {"content": ...}}}`."""
    builder = SettingsCardRequestBody.builder().settings(json.dumps(settings, ensure_ascii=False)).sequence(sequence)
    if uuid:
        builder = builder.uuid(uuid)
    request = SettingsCardRequest.builder().card_id(card_id).request_body(builder.build()).build()
    feishu_call(
        bot=bot,
        operation="card.settings",
        call=lambda c: c.cardkit.v1.card.settings(request),
        sleep=sleep,
        budget=budget,
    )


def reaction_create(
    *,
    bot: Bot,
    message_id: str,
    emoji_type: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> str:
    """Add a reaction (R1 receipt) -> reaction_id, which `reaction_delete` needs."""
    body = (
        CreateMessageReactionRequestBody.builder().reaction_type(Emoji.builder().emoji_type(emoji_type).build()).build()
    )
    request = CreateMessageReactionRequest.builder().message_id(message_id).request_body(body).build()
    response = feishu_call(
        bot=bot,
        operation="reaction.create",
        call=lambda c: c.im.v1.message_reaction.create(request),
        sleep=sleep,
        budget=budget,
    )
    return str(response.data.reaction_id or "")


def reaction_delete(
    *,
    bot: Bot,
    message_id: str,
    reaction_id: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    request = DeleteMessageReactionRequest.builder().message_id(message_id).reaction_id(reaction_id).build()
    feishu_call(
        bot=bot,
        operation="reaction.delete",
        call=lambda c: c.im.v1.message_reaction.delete(request),
        sleep=sleep,
        budget=budget,
    )


class ResourceTooLarge(FeishuApiError):
    """The resource is larger than the caller accepts; it was not read (not retryable)."""

    def __init__(self, *, size: int | None, max_bytes: int) -> None:
        shown = "unknown" if size is None else str(size)
        super().__init__(f"resource of {shown} bytes exceeds {max_bytes} bytes", code=MESSAGE_RESOURCE_TOO_LARGE_CODE)
        self.size = size
        self.max_bytes = max_bytes


def message_resource_get(
    *,
    bot: Bot,
    message_id: str,
    file_key: str,
    type: str,  # noqa: A002 - Feishu's own parameter name: "image" | "file"
    max_bytes: int,
    sleep: Callable[[float], None] | None = None,
) -> MessageResource:
    """Download a message's image or file, refusing one over `max_bytes` by its Content-Length or, when the
    length is absent or wrong, as soon as more than `max_bytes` have arrived (the rest is never read)."""
    if type not in ("image", "file"):
        raise ValueError(f"resource type must be image or file, not {type!r}")
    if bot.is_sandbox:  # this download bypasses the SDK's transport, so it refuses a sandbox bot itself
        raise FeishuApiError("a sandbox bot has no message resources", code=MESSAGE_NOT_FOUND_CODE)
    path = MESSAGE_RESOURCE_PATH.format(
        message_id=requests.utils.quote(message_id, safe=""), file_key=requests.utils.quote(file_key, safe="")
    )

    def call(client: FeishuClient) -> Any:
        token = TokenManager.get_self_tenant_token(client.config)
        response = requests.get(
            settings.FEISHU_DOMAIN.rstrip("/") + path,
            params={"type": type},
            headers={"Authorization": f"Bearer {token}"},
            stream=True,
            timeout=CLIENT_TIMEOUT_SECONDS,
        )
        return _StreamedResource(response, max_bytes=max_bytes)

    result = feishu_call(bot=bot, operation="message.resource", call=call, sleep=sleep)
    return result.resource


def message_items_get(
    *, bot: Bot, message_id: str, sleep: Callable[[float], None] | None = None
) -> list[FetchedMessage]:
    """Every item im.v1.message.get answers: the message itself, then, for a merge_forward, its children (each
    with `upper_message_id`, reference doc §4.5)."""
    request = GetMessageRequest.builder().message_id(message_id).build()
    response = feishu_call(bot=bot, operation="message.get", call=lambda c: c.im.v1.message.get(request), sleep=sleep)
    items = response.data.items or []
    if not items:
        raise FeishuApiError("message not found", code=230110)
    return [_fetched(item, message_id=message_id) for item in items]


def message_get(*, bot: Bot, message_id: str, sleep: Callable[[float], None] | None = None) -> FetchedMessage:
    return message_items_get(bot=bot, message_id=message_id, sleep=sleep)[0]


def _fetched(item: Any, *, message_id: str) -> FetchedMessage:
    try:
        content = json.loads(item.body.content) if item.body and item.body.content else {}
    except ValueError:
        content = {}
    sender = item.sender
    return FetchedMessage(
        message_id=item.message_id or message_id,
        msg_type=item.msg_type or "",
        content=content if isinstance(content, dict) else {},
        sender_id=(sender.id if sender else "") or "",
        sender_type=(sender.sender_type if sender else "") or "",
        root_id=item.root_id or "",
        parent_id=item.parent_id or "",
        thread_id=item.thread_id or "",
        mentions=[{"key": m.key, "id": m.id, "name": m.name} for m in (item.mentions or [])],
        upper_message_id=item.upper_message_id or "",
    )


def bot_info_open_id(*, bot: Bot, sleep: Callable[[float], None] | None = None) -> str:
    """`GET /open-apis/bot/v3/info` -> bot.open_id (F6); the SDK has no typed call for it."""
    request = (
        BaseRequest.builder()
        .http_method(HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({AccessTokenType.TENANT})
        .build()
    )

    def call(client: FeishuClient) -> Any:
        return _RawResult(client.request(request))

    response = feishu_call(bot=bot, operation="bot.info", call=call, sleep=sleep)
    return str((response.body.get("bot") or {}).get("open_id") or "")


class _RawResult:
    """Adapts a raw response (bytes content) to the success()/code/msg shape feishu_call reads, reading it as
    lark.Client.request does: a JSON body carries the code, another 2xx body is a success."""

    def __init__(self, raw: RawResponse) -> None:
        self.raw = raw
        is_json = (raw.headers.get("Content-Type") or "").startswith("application/json")
        try:
            self.body = json.loads(raw.content or b"{}")
        except ValueError:
            if is_json:
                raise  # what the SDK's unmarshal raises: a transport error to feishu_call
            self.body = {}
        self.code = self.body.get("code", None if is_json or not 200 <= raw.status_code < 300 else 0)
        self.msg = self.body.get("msg", "")

    def success(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class ChatInfo:
    """What `im.v1.chat.get` says about a group: its name and whether every message there is a topic (G1)."""

    name: str
    chat_mode: str  # "group" | "topic" | "p2p"
    group_message_type: str  # "chat" | "thread" ("" when Feishu does not say)

    @property
    def is_topic_chat(self) -> bool:
        """A topic group (chat_mode "topic") or a group in topic form (group_message_type "thread")."""
        return self.chat_mode == "topic" or self.group_message_type == "thread"


def chat_get(*, bot: Bot, chat_id: str, sleep: Callable[[float], None] | None = None) -> ChatInfo:
    """`GET /open-apis/im/v1/chats/{chat_id}`: the group's name and mode (G1); read once per workspace."""
    request = GetChatRequest.builder().chat_id(chat_id).build()
    response = feishu_call(bot=bot, operation="chat.get", call=lambda c: c.im.v1.chat.get(request), sleep=sleep)
    data = response.data
    return ChatInfo(
        name=(data.name if data else "") or "",
        chat_mode=(data.chat_mode if data else "") or "",
        group_message_type=(data.group_message_type if data else "") or "",
    )


class _StreamedResource:
    """A resource download in the success()/code/msg/raw shape feishu_call reads; reads at most max_bytes + 1."""

    def __init__(self, response: requests.Response, *, max_bytes: int) -> None:
        self.raw = response
        self.code: int | None = 0
        self.msg = ""
        self.resource: MessageResource | None = None
        with response:
            mime = response.headers.get("Content-Type", "")
            if response.status_code >= 300 or mime.startswith("application/json"):
                try:
                    body = json.loads(response.raw.read(MESSAGE_RESOURCE_CHUNK_BYTES) or b"{}")
                except ValueError:
                    body = {}
                self.code = body.get("code") if isinstance(body, dict) else None
                self.msg = (body.get("msg") if isinstance(body, dict) else "") or f"HTTP {response.status_code}"
                if self.code in (0, None):
                    self.code = None  # an error without a Feishu code: transport-like, retryable
                return
            declared = response.headers.get("Content-Length")
            size = int(declared) if declared and declared.isdigit() else None
            if size is not None and size > max_bytes:
                raise ResourceTooLarge(size=size, max_bytes=max_bytes)
            chunks: list[bytes] = []
            received = 0
            for chunk in response.iter_content(MESSAGE_RESOURCE_CHUNK_BYTES):
                received += len(chunk)
                if received > max_bytes:
                    raise ResourceTooLarge(size=size, max_bytes=max_bytes)
                chunks.append(chunk)
            self.resource = MessageResource(
                content=b"".join(chunks), name=_file_name(response.headers), mime=mime.split(";")[0].strip()
            )

    def success(self) -> bool:
        return self.code == 0 and self.resource is not None


def _file_name(headers: Any) -> str:
    disposition = headers.get("Content-Disposition", "")
    for part in disposition.split(";"):
        name, _, value = part.strip().partition("=")
        if name.lower() == "filename":
            return value.strip().strip('"')
    return ""
