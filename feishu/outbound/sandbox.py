"""The sandbox transport: every Feishu call of a sandbox bot (the playground's stand-ins) is answered here, on this
machine, and recorded; nothing it sends can reach Feishu (F5, issue 14 item 8).

The seam is the lowest level every lark-oapi call goes through: `lark_oapi.core.http.Transport.execute` (and its
async twin), which the SDK's typed services and its token manager all call with the client's `Config`. A sandbox
bot's client is built with `SANDBOX_DOMAIN` (feishu/outbound/client.py); the router below answers any request
whose config carries that domain and hands every other request, unchanged, to the SDK's own transport. So:
- a playground message cannot leave the machine: messages, CardKit cards (create, element content, settings),
  reactions, reads and the tenant token of a sandbox bot never get to `requests`;
- a real chat's message cannot be swallowed: a bot that is not a sandbox gets the real domain, and the router
  looks at nothing but the config's domain (a chat id, a message id or a card id plays no part).
The one call that bypasses the SDK's transport, the streamed resource download, refuses sandbox bots itself.

Answers carry Feishu's shapes (reference doc §4): a reply or a new message gets an `om_sandbox_…` id, a card a
`sandbox_card_…` id, a reaction a `sandbox_reaction_…` id, so the code above cannot tell the difference.
"""

import json
import logging
import secrets
from typing import Any

from asgiref.sync import sync_to_async

from feishu.models import SandboxCall
from feishu.outbound.sdk import JSON, Config, RawResponse, Transport

logger = logging.getLogger(__name__)

# `.invalid` never resolves (RFC 2606): even a call that escaped the router could not reach a host.
SANDBOX_DOMAIN = "https://feishu-sandbox.invalid"
SANDBOX_MESSAGE_PREFIX = "om_sandbox_"
SANDBOX_CARD_PREFIX = "sandbox_card_"
SANDBOX_REACTION_PREFIX = "sandbox_reaction_"
SANDBOX_TOKEN = "t-sandbox"  # noqa: S105 - not a secret: the sandbox's stand-in tenant token
MESSAGE_NOT_FOUND_CODE = 230110  # Feishu's "message not found": a sandbox has no messages to read back

_sdk_execute = Transport.execute
_sdk_aexecute = Transport.aexecute


def is_sandbox_config(conf: Config) -> bool:
    return (conf.domain or "").rstrip("/") == SANDBOX_DOMAIN


def _path(req: Any) -> str:
    uri = str(req.uri or "")
    for key, value in (req.paths or {}).items():
        uri = uri.replace(":" + key, str(value))
    return uri


def _body(req: Any) -> Any:
    if req.body is None:
        return None
    try:  # the SDK's own marshaller: the record is what it would have sent
        return json.loads(JSON.marshal(req.body))
    except (TypeError, ValueError):
        return None


def sandbox_answer(*, method: str, uri: str, paths: dict[str, str], body: Any) -> tuple[int, dict[str, Any]]:
    """Feishu's answer to one call, as a pure function of the request: (HTTP status, JSON body)."""
    if uri.endswith("/tenant_access_token/internal"):
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": SANDBOX_TOKEN, "expire": 7200}
    if uri.endswith("/app_access_token/internal"):
        return 200, {"code": 0, "msg": "ok", "app_access_token": SANDBOX_TOKEN, "expire": 7200}
    if uri == "/open-apis/bot/v3/info":
        return 200, {"code": 0, "msg": "ok", "bot": {"open_id": "", "app_name": "sandbox"}}
    if uri.startswith("/open-apis/im/v1/messages") and uri.endswith("/reactions"):
        if method == "POST":
            reaction_id = SANDBOX_REACTION_PREFIX + secrets.token_hex(8)
            return 200, {"code": 0, "msg": "ok", "data": {"reaction_id": reaction_id}}
        return 200, {"code": 0, "msg": "ok", "data": {}}
    if uri.startswith("/open-apis/im/v1/messages") and method == "POST":
        data: dict[str, Any] = {"message_id": SANDBOX_MESSAGE_PREFIX + secrets.token_hex(10)}
        if isinstance(body, dict) and body.get("reply_in_thread"):
            data["thread_id"] = "omt_sandbox_" + secrets.token_hex(6)
        return 200, {"code": 0, "msg": "ok", "data": data}
    if uri.startswith("/open-apis/im/v1/messages") and method == "GET":
        return 200, {"code": MESSAGE_NOT_FOUND_CODE, "msg": "message not found (sandbox)", "data": {"items": []}}
    if uri == "/open-apis/cardkit/v1/cards" and method == "POST":
        return 200, {"code": 0, "msg": "ok", "data": {"card_id": SANDBOX_CARD_PREFIX + secrets.token_hex(10)}}
    if uri.startswith("/open-apis/im/v1/chats/") and method == "GET":
        return 200, {"code": 0, "msg": "ok", "data": {"name": "", "chat_mode": "group", "group_message_type": "chat"}}
    return 200, {"code": 0, "msg": "ok", "data": {}}


def _record(*, conf: Config, req: Any) -> RawResponse:
    method = str(req.http_method.name)
    body = _body(req)
    status, answer = sandbox_answer(method=method, uri=str(req.uri or ""), paths=dict(req.paths or {}), body=body)
    path = _path(req)
    if not path.endswith("_access_token/internal"):  # the token exchange carries the app secret: never stored
        SandboxCall.objects.create(app_id=str(conf.app_id or "")[:64], method=method, path=path[:300], body=body)
    logger.info("feishu call recorded (sandbox)", extra={"app_id": conf.app_id, "method": method, "path": path})
    response = RawResponse()
    response.status_code = status
    response.headers = {"Content-Type": "application/json; charset=utf-8"}
    response.content = json.dumps(answer).encode()
    return response


def _execute(conf: Config, req: Any, option: Any = None) -> RawResponse:
    if is_sandbox_config(conf):
        return _record(conf=conf, req=req)
    return _sdk_execute(conf, req, option)


async def _aexecute(conf: Config, req: Any, option: Any = None) -> RawResponse:
    if is_sandbox_config(conf):
        return await sync_to_async(_record)(conf=conf, req=req)
    return await _sdk_aexecute(conf, req, option)


def sandbox_transport_install() -> None:
    """Route the SDK's transport through the sandbox check; idempotent. client.py calls it at import, so no
    lark client of ours exists without it."""
    if Transport.execute is not _execute:
        Transport.execute = staticmethod(_execute)
        Transport.aexecute = staticmethod(_aexecute)
