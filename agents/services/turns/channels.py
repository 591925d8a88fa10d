"""The channel port: what differs between triggers, behind one small interface the runner calls (L2).

agents never imports the Feishu bridge, so the bridge plugs its channel in: `channel_register("feishu", ...)` in
its AppConfig.ready(). agents registers `rest` (the reply is delivered by being stored: /history shows it) and
`automation` (the same, unless the bridge replaces it with one that also posts to the automation's chat).

Hooks, in the order the runner calls them:
- `claim_reads()`: what the channel reads about a turn, annotated on the claim's own read (one statement).
- `prepare(turn)`: once, on the turn's first claim: the user's text and the prompt the model gets (stored on the
  turn's user_message, with the context decision), or a `Skip` with an optional one-line notice. A retry sends
  what was recorded and never prepares again (so it writes no second decision). May raise `PrepareRetryable`.
- `activation_contract(turn)`: every run; a discuss turn's contract is rebuilt from its judgement (one source).
- `attachments(turn, vision)`: every run, a `TurnAttachments`: the images and files of the user's message,
  fetched now (never stored) and joined to the prompt; images only when `vision` (the primary model reads them),
  else their labels. Never raises for a resource: what could not be fetched is a label saying why.
- `started(turn)`: the run began (the receipt reaction of R1 will hang here).
- `stream_sink(turn)`: an optional `StreamSink` the model calls feed while they run: each delta of text as the
  provider streams it, and one short label per tool call (the streaming card of R3 shows both).
- `deliver(turn, reply)`: idempotent (a fixed uuid per turn and chunk); raises `DeliveryRetryable` or
  `DeliveryPermanent`.
- `approval_place(turn)`: where a tool call that needs approval was asked (H1/U5): the chat whose owner may decide,
  and the part of the thread an "allow in this conversation" grant covers.
- `approval_requested(turn, approval)` / `approval_decided(turn, approval, decision)`: a tool call waits for a
  person (H1): show the question (Feishu: a card with buttons), then the decision made elsewhere (REST, timeout).
- `failed(turn, status)`: the turn ended failed or delivery_failed; tell the chat in one line when it can be reached.

The automation channel has two more, asked by agents.services.automations before a run's turn exists (U4):
`run_admission(automation, principal, admission)`, the door's decision for this run's principal, and
`run_stopped(automation, admission)`, telling its creator once that a refused automation was stopped.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.models import Automation, Message, Thread, Turn
from agents.principals import Admission, Principal
from agents.services.turns.assembly import NO_ATTACHMENTS, TurnAttachments
from core.connections import connection_release
from core.text import TranslatableText


class StreamSink:
    """What the runner feeds while the model works. Called from the worker's thread, in order.

    `text(delta)`: a piece of the answer as the provider streams it. With tools, every model call of the loop
    streams; a `tool_step` marks where one call ended in tool calls and the next begins. The stored reply (and
    what `deliver` gets) is the last call's whole text, so a sink must treat what it shows as a draft.
    `tool_step(label)`: a tool call is about to run (a short label such as "docs · search"; never its arguments).
    An exception from a sink propagates: the runner treats it like any error of the channel.
    """

    def text(self, delta: str) -> None:
        return None

    def tool_step(self, label: str) -> None:
        return None


class ConnectionReleasingSink(StreamSink):
    """The channel's sink, closing the database connection its notes (a streaming card's ids) opened: a turn
    streaming its answer holds no connection between the model's chunks either (core.connections, issue 28)."""

    def __init__(self, sink: StreamSink) -> None:
        self.sink = sink

    def text(self, delta: str) -> None:
        try:
            self.sink.text(delta)
        finally:
            connection_release()

    def tool_step(self, label: str) -> None:
        try:
            self.sink.tool_step(label)
        finally:
            connection_release()


@dataclass(frozen=True)
class Prepared:
    content: str  # what the person wrote (the user_message's content)
    prompt: str = ""  # what the model gets, when different
    author: str = ""
    context_decision_id: int | None = None
    channel_state: dict = field(default_factory=dict)  # the channel's own notes for deliver (e.g. the root went in)


@dataclass(frozen=True)
class ApprovalPlace:
    """Where a call that needs approval was asked (U5). `chat_id`: the channel's chat (a Feishu chat; empty for
    REST). `topic`: the part of the thread a grant to "allow in this conversation" covers besides the thread itself
    (a Feishu topic; empty: the whole thread, as a REST thread or a DM is one conversation)."""

    chat_id: str = ""
    topic: str = ""


@dataclass(frozen=True)
class Skip:
    reason: str  # stored on the turn (admin)
    notice: TranslatableText = ""  # told to the chat, when not empty (a fixed text, in the bot's language)


class PrepareRetryable(Exception):
    """Preparing failed for a reason a later try may fix (a 5xx reading the quoted message)."""


class DeliveryError(Exception):
    pass


class DeliveryRetryable(DeliveryError):
    """429, 5xx, transport: the same delivery (same uuids) is tried again later."""


class DeliveryPermanent(DeliveryError):
    """The channel refused for good (bot removed from the chat, message recalled): delivery_failed at once."""


FAILED_NOTICE_TEXT = "Sorry, something went wrong and I could not answer this message."
DELIVERY_FAILED_NOTICE_TEXT = "Sorry, I wrote an answer but could not post it here."


def failure_notice_text(*, status: str) -> str:
    """The one line a chat hears when its turn ended failed or delivery_failed."""
    return DELIVERY_FAILED_NOTICE_TEXT if status == Turn.Status.DELIVERY_FAILED else FAILED_NOTICE_TEXT


class TurnChannel:
    """Defaults: nothing to prepare beyond the stored user_message, nothing to deliver, nobody to tell."""

    name = ""

    def prepare(self, *, turn: Turn) -> Prepared | Skip:
        return Skip(reason="The turn has no user message to answer.")

    def claim_reads(self) -> dict:
        """What the channel reads about a turn, as annotations of the claim's read (each a subquery correlated with
        the turn's row, by name): one statement instead of one read each in the hooks (issue 28). The hooks find
        them as attributes of the claimed Turn, and read by themselves when a claim did not annotate them."""
        return {}

    def activation_contract(self, *, turn: Turn) -> str:
        return ""

    def attachments(self, *, turn: Turn, vision: bool) -> TurnAttachments:
        return NO_ATTACHMENTS

    def started(self, *, turn: Turn) -> None:
        return None

    def steered_texts(self, *, turn: Turn, steered: Sequence[Turn]) -> list[str]:
        """The requests of `steered` (taken into the running `turn`, queue mode steer) as the model reads them,
        oldest first: their stored request messages."""
        return [t.user_message.prompt or t.user_message.content for t in steered if t.user_message is not None]

    def stream_sink(self, *, turn: Turn) -> StreamSink | None:
        return None

    def deliver(self, *, turn: Turn, reply: Message) -> None:
        return None

    def notice(self, *, turn: Turn, text: TranslatableText, purpose: str) -> None:
        return None

    def approval_place(self, *, turn: Turn) -> ApprovalPlace:
        return ApprovalPlace()

    def approval_requested(self, *, turn: Turn, approval) -> None:
        return None

    def approval_decided(self, *, turn: Turn, approval, decision) -> None:
        return None

    def failed(self, *, turn: Turn, status: str) -> None:
        self.notice(turn=turn, text=failure_notice_text(status=status), purpose=f"turn_{status}")


class RestChannel(TurnChannel):
    """REST chat: the user_message is stored with the turn; the reply is seen in /history once stored."""

    name = Thread.Channel.REST


class AutomationChannel(TurnChannel):
    """An automation run: the automation's prompt is the user_message (mask 0 in its automation thread)."""

    name = Thread.Channel.AUTOMATION
    AUTHOR = "automation"

    def prepare(self, *, turn: Turn) -> Prepared | Skip:
        automation = getattr(turn.thread, "automation", None)
        if automation is None:
            return Skip(reason="The automation of this thread was deleted.")
        return Prepared(content=automation.prompt, author=self.AUTHOR)

    def run_admission(self, *, automation: Automation, principal: Principal, admission: Admission) -> Admission:
        """U4: may this run act for `principal`? agents knows no chat, so the principal's own standing decides (the
        bot's owner, for an automation made in the console); the Feishu bridge asks its admission check for a
        schedule's creator in the chat it posts to, at every run."""
        return admission

    def run_stopped(self, *, automation: Automation, admission: Admission) -> None:
        """A refused automation was stopped (once): tell the person it acted for, where they can read it."""
        return None


_channels: dict[str, TurnChannel] = {}


def channel_register(name: str, channel: TurnChannel) -> None:
    """Plug a channel in (the bridge calls this from its AppConfig.ready()); the last registration wins."""
    _channels[name] = channel


def channel_for(*, thread: Thread) -> TurnChannel:
    return channel_named(thread.channel)


def automation_channel() -> AutomationChannel:
    """The channel of automation runs (the bridge's, once registered), with its run hooks (U4)."""
    channel = channel_named(Thread.Channel.AUTOMATION)
    return channel if isinstance(channel, AutomationChannel) else AutomationChannel()


def channel_named(name: str) -> TurnChannel:
    """The channel of threads whose `channel` is `name` (the claim knows the name before it reads the thread)."""
    return _channels.get(name) or _DEFAULT


_DEFAULT = TurnChannel()
channel_register(Thread.Channel.REST, RestChannel())
channel_register(Thread.Channel.AUTOMATION, AutomationChannel())
