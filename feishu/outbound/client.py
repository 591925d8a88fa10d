"""Outbound Feishu calls through lark-oapi: one client per bot, and the one retry policy every call goes through.

`feishu_call` runs one SDK call for a bot and returns its successful response or raises `FeishuApiError`
(feishu/outbound/api_errors.py). The calls themselves live by what they do: messages and reactions
(feishu/outbound/sends.py), CardKit cards (feishu/outbound/cardkit.py), reads and resource downloads
(feishu/outbound/reads.py); each reaches `feishu_call` through this module's attribute, so there is one seam.

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
from typing import Any

from django.conf import settings

from agents.models import Bot
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.budget import SendBudget
from feishu.outbound.sandbox import SANDBOX_DOMAIN, sandbox_transport_install
from feishu.outbound.sdk import (
    BaseRequest,
    CardkitService,
    Config,
    DocxService,
    ImService,
    LogLevel,
    ObtainAccessTokenException,
    RawResponse,
    RequestOption,
    TokenManager,
    Transport,
    WikiService,
    domain_is_origin,
    request_token_add,
    sdk_logger,
)

# Every lark client of ours goes through the sandbox check (a sandbox bot's calls never leave the machine).
sandbox_transport_install()

logger = logging.getLogger(__name__)

TOKEN_EXPIRED_CODES = frozenset({99991663, 99991661})
MAX_CALL_ATTEMPTS = 4
# A rate-limit wait is capped so one worker is never parked for a whole minute; the task retries later.
MAX_RATE_LIMIT_WAIT_SECONDS = 10.0
DEFAULT_RATE_LIMIT_WAIT_SECONDS = 1.0
CLIENT_TIMEOUT_SECONDS = 10.0


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
        self.docx = DocxService(config)  # H2: documents linked in a request, read as the bot
        self.wiki = WikiService(config)

    def request(self, request: BaseRequest) -> RawResponse:
        """A request the SDK has no typed call for: its access token added, sent by the SDK's transport."""
        option = RequestOption()
        request_token_add(self.config, request, option)
        return Transport.execute(self.config, request, option)

    def tenant_token(self) -> str:
        """The app's tenant token from the SDK's process-wide cache, fetched when absent or expired."""
        return TokenManager.get_self_tenant_token(self.config)


# One client per bot (issue 9.11): the entry is replaced when the bot's credentials or the domain change,
# never added beside the old one, so saving a bot a thousand times keeps one client.
_clients: dict[int, tuple[tuple[str, str, str], FeishuClient]] = {}
_clients_lock = threading.Lock()


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
        client.tenant_token()
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


class RawResult:
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
