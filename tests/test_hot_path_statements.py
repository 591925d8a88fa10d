"""Issue 28: the statements one message costs, end to end, counted as production issues them, per phase.

An @-mention in an ordinary group (its main timeline) goes through the webhook (the store), the stored event's task
(`inbound_event_process`: intake, routing, the turn's creation) and the turn (`turn_run`: claim, context selection,
the model at the local stub, delivery to the Feishu stub, ledger). Unlike tests/test_hot_path_queries.py (which
EXPLAINs each statement inside a test transaction), these tests run without a wrapping transaction, so every
`atomic()` is a real BEGIN/COMMIT (not counted: the driver's, not a statement) and every nested one a real
SAVEPOINT/RELEASE (counted); the tasks a phase enqueues are held back and run as the next phase.

Each phase is bounded on its own; a failure lists the phase's statements with where each was issued. To print the
breakdown: `python -m pytest tests/test_hot_path_statements.py -s` (with DATABASE_URL for PostgreSQL).

Where the @-mention's statements go on PostgreSQL (issue 28 took them from 33 to 21 for a plain text reply):
- webhook (1): the event's INSERT (the bot comes from the web process's cache).
- intake (6): the claim (UPDATE ... RETURNING, committed before the work); the thread event with its context item
  (one CTE); the session's thread through its binding (one read); the turn (INSERT ... ON CONFLICT DO NOTHING); the
  absorb of discuss wakes carrying the event's finish (one CTE); the turn's enqueue stamp (after commit, before the
  publish, so the sweeper can tell a lost publish from a queued one).
- turn (14): the conversation's lock; the claim's read (the turn, the turns holding its conversation, the source
  payload and the session binding as subqueries); the claim's conditional UPDATE; the request's context cutoff (O3)
  and candidates (C5); the context decision; the user_message with the turn's record (one CTE); the model's
  context messages; the reply with the turn's record (one CTE); the delivery row; its sent status; the agent_output
  thread event (one CTE); the conversation's lock and the finish reading the next turn (one UPDATE ... RETURNING).
The default reply (receipt reaction, streamed card) adds the receipt's note before and after its call, its removal
and the card's state stored before each Feishu call (create, post, push, close, finish) with its rows.
"""

import os
import traceback

import pytest
from django.core.cache import cache
from django.db import connection

from agents.models import Bot
from agents.services.turns import turn_run
from agents.tasks import turn_run_task
from feishu.inbound.routing import inbound_event_process
from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
from feishu.models import InboundEvent
from feishu.tasks import inbound_event_process as inbound_event_process_task
from tests.feishu.conftest import bot_open_id, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
from tests.test_hot_path_queries import bot  # noqa: F401  (fixture)
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)

# Statements per phase, savepoints included. PostgreSQL writes a row together with the row that points at it (a
# data-modifying CTE); SQLite has no DML in a WITH clause and takes one statement more for each such pair.
MAX_STATEMENTS = {
    "postgresql": {"webhook": 1, "intake": 6, "turn": 14, "turn_card": 21, "discuss": 3},
    "sqlite": {"webhook": 1, "intake": 8, "turn": 23, "turn_card": 30, "discuss": 6},
}
BUDGET_MODULE = "feishu/outbound/budget.py"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Statements:
    """Every statement the connection runs, with the project frames that issued it."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    def __call__(self, execute, sql, params, many, context):
        frames = [
            frame
            for frame in traceback.extract_stack()[:-1]
            if frame.filename.startswith(ROOT) and "/tests/" not in frame.filename and "/.venv/" not in frame.filename
        ]
        origin = " < ".join(f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} {f.name}" for f in frames[::-1][:2])
        self.rows.append((sql, origin))
        return execute(sql, params, many, context)


def _counted(phase: str, run, *, skip_last: int = 0):
    """Run `run`, print its statements and bound them; the send budget's are counted apart (table rows without
    REDIS_URL, read again after a wait; one Lua script in Redis with it: not a database statement)."""
    recorder = _Statements()
    with connection.execute_wrapper(recorder):
        result = run()
    rows = recorder.rows[: len(recorder.rows) - skip_last]
    budget = [row for row in rows if BUDGET_MODULE in row[1]]
    rows = [row for row in rows if BUDGET_MODULE not in row[1]]
    listing = "\n".join(f"  {sql[:140]}\n      <- {origin}" for sql, origin in rows)
    print(f"\n{phase}: {len(rows)} statements (+ {len(budget)} of the send budget's table)\n{listing}")
    bound = MAX_STATEMENTS[connection.vendor][phase]
    assert len(rows) <= bound, f"{phase}: {len(rows)} statements (at most {bound})\n{listing}"
    return result, len(rows)


@pytest.fixture
def held(mocker):
    """The tasks each phase enqueues, held back (the test runs them as the next phase)."""
    mocker.patch.object(inbound_event_process_task, "apply_async")
    return mocker.patch.object(turn_run_task, "apply_async")


def _post(client, feishu_bot, **message) -> InboundEvent:
    payload = message_event_payload(
        verification_token=feishu_bot.feishu_verification_token,
        app_id=feishu_bot.feishu_app_id,
        chat_id="oc_group",
        sender_open_id="ou_alice",
        **message,
    )
    request = event_request_build(payload=payload, encrypt_key=feishu_bot.feishu_encrypt_key)
    headers = {k: v for k, v in request.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
    response = client.post(
        f"/feishu/webhook/{feishu_bot.slug}/", data=request.body, content_type="application/json", **headers
    )
    assert response.status_code == 200
    return InboundEvent.objects.get(message_id=message["message_id"])


def _mention(feishu_bot, text: str, message_id: str) -> dict:
    return {
        "text": f"@_user_1 {text}",
        "message_id": message_id,
        "mentions": [mention_entry(index=1, open_id=bot_open_id(feishu_bot), name=feishu_bot.name)],
    }


def _answered(client, feishu_bot, message_id: str) -> None:
    """One @ answered the whole way: the processes' caches (the bot, the workspace) are warm, as in a busy hub."""
    event = _post(client, feishu_bot, **_mention(feishu_bot, "hello", message_id))
    assert turn_run(turn_id=inbound_event_process(event_pk=event.pk).turn.pk) == "delivered"


@pytest.mark.parametrize(
    ("turn_phase", "reply_fields"),
    [("turn", {"reply_format": "text", "receipt_emoji": ""}), ("turn_card", {})],
    ids=["plain_text_reply", "streamed_card_with_receipt"],
)
def test_i28_an_at_mention_costs_its_bounded_statements_per_phase(
    client,
    bot,  # noqa: F811
    feishu_stub,  # noqa: F811
    held,
    turn_phase,
    reply_fields,
):
    # given: a busy hub: two @s of this group answered before (the second one after the bot's last save)
    Bot.objects.filter(pk=bot.pk).update(**reply_fields)
    _answered(client, bot, "om_warm_1")
    _answered(client, bot, "om_warm_2")
    # when: the next @, phase by phase (the test's own read of the stored event is left out of the webhook's count)
    event, webhook = _counted(
        "webhook", lambda: _post(client, bot, **_mention(bot, "summarise", "om_next")), skip_last=1
    )
    routed, intake = _counted("intake", lambda: inbound_event_process(event_pk=event.pk))
    outcome, turn = _counted(turn_phase, lambda: turn_run(turn_id=routed.turn.pk))
    # then: answered in the main timeline, within the bounds above
    assert (routed.outcome, outcome) == ("turn", "delivered")
    assert feishu_stub.sent[-1]["parent_id"] == "om_next"
    print(f"\n{connection.vendor} {turn_phase}: webhook {webhook} + intake {intake} + turn {turn}")


def test_i28_an_unaddressed_discuss_message_is_held_in_its_bounded_statements(client, bot, feishu_stub, held):  # noqa: F811
    # given: a discuss group whose wake is already debouncing (the second message of a conversation)
    _answered(client, bot, "om_warm_1")
    Workspace.objects.filter(bot_profile=bot.slug).update(reply_mode=Workspace.ReplyMode.DISCUSS)
    cache.clear()  # the workspace's cached reply policy (an update() sends no signal)
    first = _post(client, bot, text="what do you all think?", message_id="om_d1")
    inbound_event_process(event_pk=first.pk)
    event = _post(client, bot, text="about the release", message_id="om_d2")
    # when
    result, _ = _counted("discuss", lambda: inbound_event_process(event_pk=event.pk))
    # then: held in its wake, within the bound above
    assert result.outcome == "discuss_wake"
