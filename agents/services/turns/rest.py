"""REST chat's entry point: the user message and its turn are stored in one transaction, the turn is queued
after commit (a refused enqueue leaves a queued turn the sweeper picks up), and the runner does the rest.
"""

from django.db import transaction

from agents.models import Message, Thread, Turn
from agents.principals import DOOR_REST, Admission, Principal
from agents.secrets import hub_secrets
from agents.services.enqueue import turn_enqueue
from agents.services.threads import message_create
from agents.services.turns import ledger
from core.redaction import redacted
from core.text import storable_text

REST_MESSAGE_MAX_CHARS = 32000


def rest_message_post(
    *, thread: Thread, content: str, author: str = "", user_id: int | None = None
) -> tuple[Message, Turn]:
    """REST chat: store the user message (mask from the thread, V4), create its turn, run it after commit.
    The turn acts for the authenticated user (`user_id`, U1), whom the API admitted (agents.selectors.thread_get:
    the bot's owner, or staff with the permission)."""
    with transaction.atomic():
        message = message_create(
            thread=thread,
            kind=Message.Kind.USER_MESSAGE,
            # A pasted secret is redacted before it is stored, shown by /history/ or sent to a model (issue 30).
            content=redacted(storable_text(content), secrets=hub_secrets()),
            author=author,
        )
        turn, _ = ledger.turn_get_or_create(
            bot=thread.bot,
            thread=thread,
            trigger=Turn.Trigger.REST,
            source_message_id=f"rest:{message.pk}",
            user_message=message,
            principal=Principal(user_id=user_id),
            admission=Admission(True, DOOR_REST, "admitted", "the API user may use this bot"),
        )
        transaction.on_commit(lambda: turn_enqueue(turn_id=turn.pk))
    return message, turn
