"""Writes for threads and messages: the only place a Thread or a Message is created.

A message's visibility mask is always derived from its thread's runtime mode and its kind (V4); no caller
can supply one. A thread's runtime mode is fixed at creation (chat and automation never share a thread).
"""

import logging

from agents.models import Bot, Message, Thread
from agents.visibility import message_mask
from core.exceptions import ApplicationError

logger = logging.getLogger(__name__)


class InvalidRuntimeModeError(ApplicationError):
    pass


class InvalidMessageKindError(ApplicationError):
    pass


def thread_create(*, bot: Bot, runtime_mode: str, channel: str, title: str = "", external_key: str = "") -> Thread:
    if runtime_mode not in Thread.RuntimeMode.values:
        raise InvalidRuntimeModeError(
            f"Unknown runtime_mode {runtime_mode!r}.",
            extra={"runtime_mode": runtime_mode, "allowed": list(Thread.RuntimeMode.values)},
        )
    if channel not in Thread.Channel.values:
        raise ApplicationError(
            f"Unknown channel {channel!r}.", extra={"channel": channel, "allowed": list(Thread.Channel.values)}
        )
    thread = Thread.objects.create(
        bot=bot, runtime_mode=runtime_mode, channel=channel, title=title, external_key=external_key
    )
    logger.info(
        "thread created",
        extra={"thread_id": thread.pk, "bot": bot.slug, "runtime_mode": runtime_mode, "channel": channel},
    )
    return thread


def message_build(
    *,
    thread: Thread,
    kind: str,
    content: str,
    prompt: str = "",
    author: str = "",
    external_message_id: str = "",
    usage: dict | None = None,
) -> Message:
    """A message of `thread`, not saved yet, its visibility derived from the thread (the one place it is)."""
    if kind not in Message.Kind.values:
        raise InvalidMessageKindError(
            f"Unknown message kind {kind!r}.", extra={"kind": kind, "allowed": list(Message.Kind.values)}
        )
    return Message(
        thread=thread,
        kind=kind,
        visibility_mask=message_mask(runtime_mode=thread.runtime_mode, kind=kind),
        content=content,
        prompt=prompt,
        author=author,
        external_message_id=external_message_id,
        usage=usage or {},
    )


def message_created_log(*, message: Message) -> None:
    logger.info(
        "message created",
        extra={
            "thread_id": message.thread_id,
            "message_id": message.pk,
            "kind": message.kind,
            "visibility_mask": message.visibility_mask,
        },
    )


def message_create(
    *,
    thread: Thread,
    kind: str,
    content: str,
    prompt: str = "",
    author: str = "",
    external_message_id: str = "",
    usage: dict | None = None,
) -> Message:
    message = message_build(
        thread=thread,
        kind=kind,
        content=content,
        prompt=prompt,
        author=author,
        external_message_id=external_message_id,
        usage=usage,
    )
    message.save(force_insert=True)
    message_created_log(message=message)
    return message
