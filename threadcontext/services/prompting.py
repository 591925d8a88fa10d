"""One call for the turn: select the context, render the prompt, record the decision (C5, C7-C11).

The contract: call `context_prompt_prepare` after `thread_event_record_inbound` said `triggers_selector`, submit
`prepared.prompt` when `prepared.is_submittable`, and after a successful submit call
`session_binding_mark_topic_root_delivered` when `prepared.topic_root_injected`. The Feishu bridge's group turn
(`feishu.channel.turn_channel.FeishuChannel.prepare`) calls it with a `topic_root_fetch` that reads a root due
but not stored locally; the seed's acceptance test drives the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from threadcontext.models import ThreadContextDecision
from threadcontext.rendering import prompt_render, request_is_submittable, topic_root_is_due
from threadcontext.selectors import (
    ContextRequest,
    context_package_build,
    topic_root_text_get,
    workspace_settings_resolve,
)
from threadcontext.services.decisions import context_decision_record
from threadcontext.trimming import ContextPackage


@dataclass(frozen=True)
class PreparedPrompt:
    prompt: str
    package: ContextPackage
    decision: ThreadContextDecision
    # The root went into this prompt: mark the binding delivered once the submit succeeds (C8).
    topic_root_injected: bool
    # An empty @bot with nothing due (no root, no quote) creates no task (C8).
    is_submittable: bool
    # The root is due but not stored locally: the bridge fetches it by root_msg_id (any sender type), records it
    # with thread_event_record_topic_root and calls again with topic_root_text.
    topic_root_missing: bool = False


def context_prompt_prepare(
    *,
    request: ContextRequest,
    topic_root_prompt_delivered: bool = False,
    topic_root_text: str | None = None,
    quoted_text: str | None = None,
    quoted_message_id: str = "",
    topic_root_fetch: Callable[[], str | None] | None = None,
) -> PreparedPrompt:
    """Build this turn's prompt from the stored thread context and record the decision with its preview.

    request: the request and its thread, the same the selector is given (`context_package_build`).
    topic_root_prompt_delivered: the session binding's flag (a new session starts with False).
    topic_root_text: the root's text when the caller already has it (e.g. fetched online); otherwise it is read
        from the local store when due.
    quoted_text: the replied-to message's text read online by the caller (C7); None when not a reply. A failed read
        must not reach here: the caller answers the user and submits nothing.
    quoted_message_id: the replied-to message's id (the reply's parent_id). When it is the topic root, the quote
        already carries the root: it is neither read nor injected a second time, and it counts as delivered (C8).
    topic_root_fetch: called only when the root is due, not the request, not quoted and not stored locally (the
        bridge reads it online and records it); None when the read failed: the prompt goes without the root and
        `topic_root_injected` stays False, so the root is due again next time (C8).
    """
    effective = workspace_settings_resolve(workspace=request.workspace)
    is_slash_command, request_text = request.is_slash_command, request.request_text
    root_due = not is_slash_command and topic_root_is_due(
        topic_root_enabled=effective.topic_root_enabled,
        topic_root_prompt_delivered=topic_root_prompt_delivered,
        is_group_scope=effective.is_group_scope,
    )
    root_is_request = request.message_id == request.root_msg_id
    quoting_the_root = quoted_text is not None and bool(quoted_message_id) and quoted_message_id == request.root_msg_id
    root_text = None
    if root_due and not root_is_request and not quoting_the_root:
        root_text = topic_root_text or topic_root_text_get(
            bridge_id=request.bridge_id, chat_id=request.chat_id, root_msg_id=request.root_msg_id
        )
        if not root_text and topic_root_fetch is not None:
            root_text = topic_root_fetch()
    package = context_package_build(request=request)
    if is_slash_command:
        prompt = request_text  # a command is handled, never submitted with context
    else:
        prompt = prompt_render(
            request_text=request_text,
            package=package,
            topic_root_text=root_text,
            root_is_request=root_is_request,
            quoted_text=quoted_text,
        )
    decision = context_decision_record(package=package, prompt_preview=prompt)
    # Delivered once a submit carried the root: as a wrapper, as the request itself, or as the quoted message.
    injected = bool(root_text and root_text in prompt)
    return PreparedPrompt(
        prompt=prompt,
        package=package,
        decision=decision,
        topic_root_injected=injected or (root_due and (root_is_request or quoting_the_root)),
        is_submittable=not is_slash_command
        and request_is_submittable(request_text=request_text, topic_root_due=bool(root_text), quoted_text=quoted_text),
        topic_root_missing=root_due and not root_is_request and not quoting_the_root and not root_text,
    )
