"""Thread context writes. Callers (the Feishu bridge, the agent turn) import from here:

from threadcontext.services import InboundMessage, Mention, thread_event_record_inbound, ...
"""

from threadcontext.selectors import ContextRequest
from threadcontext.services.bot_profiles import ProfileForgetResult, bot_profile_forget, bot_profile_rename
from threadcontext.services.collection import (
    CHAT_TYPE_GROUP,
    CHAT_TYPE_P2P,
    COLLECTED_MESSAGE_TYPES,
    SENDER_APP,
    SENDER_BOT,
    SENDER_USER,
    SKIP_DIRECT_MESSAGE,
    SKIP_EMPTY,
    SKIP_NO_WORKSPACE,
    SKIP_NOT_COLLECTED_TYPE,
    SKIP_NOT_HUMAN,
    SKIP_NOT_OWNER,
    SKIP_OWN_ECHO,
    SKIP_OWNER_ONLY_DISCUSSION,
    SKIP_SLASH_COMMAND,
    InboundMessage,
    Mention,
    RecordOutcome,
    agent_output_truncate,
    normalise_mentions,
    secrets_redact,
    thread_event_record_agent_output,
    thread_event_record_inbound,
    thread_event_record_topic_root,
)
from threadcontext.services.decisions import context_decision_record
from threadcontext.services.edits import EditResult, thread_context_edit
from threadcontext.services.prompting import PreparedPrompt, context_prompt_prepare
from threadcontext.services.recall import RecallResult, thread_context_recall
from threadcontext.services.retention import (
    PruneResult,
    thread_context_prune,
    thread_context_prune_if_due,
)
from threadcontext.services.sessions import (
    SessionBindingResult,
    session_binding_get_or_create,
    session_binding_mark_topic_root_delivered,
    session_binding_retire,
    session_scope_key,
)
from threadcontext.services.voice import VOICE_PREFIX, thread_context_voice_store, voice_text
from threadcontext.services.workspaces import (
    workspace_chat_mode_is_due,
    workspace_chat_mode_store,
    workspace_ensure,
    workspace_joined,
    workspace_retire,
)

__all__ = [
    "ProfileForgetResult",
    "bot_profile_forget",
    "bot_profile_rename",
    "CHAT_TYPE_GROUP",
    "CHAT_TYPE_P2P",
    "COLLECTED_MESSAGE_TYPES",
    "SENDER_APP",
    "SENDER_BOT",
    "SENDER_USER",
    "SKIP_DIRECT_MESSAGE",
    "SKIP_EMPTY",
    "SKIP_NO_WORKSPACE",
    "SKIP_NOT_COLLECTED_TYPE",
    "SKIP_NOT_HUMAN",
    "SKIP_NOT_OWNER",
    "SKIP_OWN_ECHO",
    "SKIP_OWNER_ONLY_DISCUSSION",
    "SKIP_SLASH_COMMAND",
    "ContextRequest",
    "InboundMessage",
    "Mention",
    "PreparedPrompt",
    "PruneResult",
    "RecallResult",
    "VOICE_PREFIX",
    "thread_context_voice_store",
    "voice_text",
    "RecordOutcome",
    "SessionBindingResult",
    "agent_output_truncate",
    "context_decision_record",
    "context_prompt_prepare",
    "normalise_mentions",
    "secrets_redact",
    "session_binding_get_or_create",
    "session_binding_mark_topic_root_delivered",
    "session_binding_retire",
    "session_scope_key",
    "thread_context_prune",
    "thread_context_recall",
    "thread_context_edit",
    "EditResult",
    "thread_context_prune_if_due",
    "thread_event_record_agent_output",
    "thread_event_record_inbound",
    "thread_event_record_topic_root",
    "workspace_chat_mode_is_due",
    "workspace_chat_mode_store",
    "workspace_ensure",
    "workspace_joined",
    "workspace_retire",
]
