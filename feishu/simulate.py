"""Scripted Feishu conversations for `feishu_simulate`, demos and load tests: parse a script, build the signed,
encrypted pushes Feishu would send, POST them to a running hub.

Script lines (blank lines and `#` comments are skipped):
    root: <text>              a new topic (un-@)
    @<slug> <text>            an @ of that bot in the current topic (several: `@planner @coder text`)
    say: <text>               un-@ discussion in the current topic
    dm: <text>                a direct message to the bot
"""

import json
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from agents.models import Bot, Turn
from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload

DEFAULT_SCRIPT = """\
# Planner then Coder in one topic
root: We need an H5 snake game for the team offsite
say: keep it simple, keyboard only
@{bot} draft a plan in three steps
@{bot} now list the risks
dm: what did we decide today?
"""


@dataclass(frozen=True)
class ScriptStep:
    kind: str  # root | say | mention | dm
    text: str
    mentions: tuple[str, ...] = field(default_factory=tuple)


def bot_local_credentials_provision(*, bot: Bot) -> bool:
    """Demo only: give a bot without a Feishu app local webhook credentials (a verification token, an encrypt key
    and an open_id) so simulated events reach it. It still has no app secret, so its replies are recorded, not
    sent (F5). Returns False when the bot already has a verification token (nothing is changed)."""
    if bot.feishu_verification_token:
        return False
    bot.feishu_verification_token = secrets.token_urlsafe(24)
    bot.feishu_encrypt_key = bot.feishu_encrypt_key or secrets.token_urlsafe(24)
    bot.feishu_bot_open_id = bot.feishu_bot_open_id or f"ou_local_{bot.slug}"
    bot.save(update_fields=["feishu_verification_token", "feishu_encrypt_key", "feishu_bot_open_id", "updated_at"])
    return True


def script_parse(text: str) -> list[ScriptStep]:
    steps = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for kind in ("root", "say", "dm"):
            if line.startswith(kind + ":"):
                steps.append(ScriptStep(kind, line[len(kind) + 1 :].strip()))
                break
        else:
            words = line.split()
            slugs = tuple(word[1:] for word in words if word.startswith("@"))
            body = " ".join(word for word in words if not word.startswith("@"))
            if not slugs:
                raise ValueError(f"Unknown script line: {raw!r}")
            steps.append(ScriptStep("mention", body, slugs))
    return steps


@dataclass
class PostResult:
    step: ScriptStep
    message_id: str
    status: int
    body: str
    milliseconds: float


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - an operator-given URL
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def conversation_simulate(
    *,
    base_url: str,
    bot: Bot,
    steps: list[ScriptStep],
    chat_id: str,
    sender_open_id: str = "ou_simulated_user",
    open_ids: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> list[PostResult]:
    """POST each step to `<base_url>/feishu/webhook/<bot.slug>/`, signed and encrypted with the bot's keys."""
    open_ids = open_ids or {}
    url = f"{base_url.rstrip('/')}/feishu/webhook/{bot.slug}/"
    root_id = ""
    results = []
    for step in steps:
        message_id = "om_sim_" + secrets.token_hex(10)
        mentions = [
            mention_entry(index=index, open_id=open_ids.get(slug, f"ou_unknown_{slug}"), name=slug)
            for index, slug in enumerate(step.mentions, start=1)
        ]
        text = "".join(f"{m['key']} " for m in mentions) + step.text
        topic_root_id = topic_parent_id = topic_thread_id = ""
        chat = chat_id
        chat_type = "group"
        if step.kind == "root":
            root_id = message_id
        elif step.kind == "dm":
            chat, chat_type = f"{chat_id}_dm", "p2p"
        elif root_id:
            topic_root_id, topic_parent_id, topic_thread_id = root_id, root_id, f"omt_{root_id[-12:]}"
        payload = message_event_payload(
            verification_token=bot.feishu_verification_token,
            app_id=bot.feishu_app_id or bot.slug,
            message_id=message_id,
            chat_id=chat,
            chat_type=chat_type,
            text=text,
            sender_open_id=sender_open_id,
            mentions=mentions,
            root_id=topic_root_id,
            parent_id=topic_parent_id,
            thread_id=topic_thread_id,
        )
        request = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
        started = time.perf_counter()
        status, body = _post(url, request.body, request.headers, timeout)
        results.append(PostResult(step, message_id, status, body, (time.perf_counter() - started) * 1000))
    return results


# A turn in one of these states has nothing more to say (its reply, if any, is stored).
TURN_FINISHED = {Turn.Status.DELIVERED, Turn.Status.DELIVERY_FAILED, Turn.Status.FAILED, Turn.Status.SKIPPED}


@dataclass(frozen=True)
class Reply:
    message_id: str  # the posted message that started the turn
    bot: str
    status: str
    text: str


def replies_wait(*, message_ids: list[str], expected: set[str], timeout: float, poll: float = 0.5) -> list[Reply]:
    """The turns the posted messages started, with their replies' text, read from the hub's database once each
    message in `expected` (the @s and DMs: each starts a turn) has a finished turn and no turn is still running,
    or when `timeout` seconds have passed (a turn still running is listed with its state and no text). A worker
    makes the replies after the webhook's 200: this waits for them instead of leaving the operator to look."""
    deadline = time.monotonic() + timeout
    while True:
        turns = list(
            Turn.objects.filter(source_message_id__in=message_ids).select_related("bot", "reply_message").order_by("id")
        )
        finished = {turn.source_message_id for turn in turns if turn.status in TURN_FINISHED}
        settled = expected <= finished and all(turn.status in TURN_FINISHED for turn in turns)
        if settled or time.monotonic() >= deadline:
            return [
                Reply(
                    message_id=turn.source_message_id,
                    bot=turn.bot.slug,
                    status=turn.status,
                    # A turn answered by another (queue mode collect or steer) says which, in its error line.
                    text=turn.reply_message.content if turn.reply_message is not None else turn.error,
                )
                for turn in turns
            ]
        time.sleep(poll)


def results_as_json(results: list[PostResult]) -> str:
    return json.dumps(
        [
            {"kind": r.step.kind, "message_id": r.message_id, "status": r.status, "ms": round(r.milliseconds, 1)}
            for r in results
        ],
        indent=2,
    )
