"""One answer per message (B3): when one un-addressed message activates several discuss bots of a chat, one answers.

Invariant: under the chat's policy `one`, at most one turn answers a message, whichever workers judge it and when.
A judge that says send does not start its turn: its bot becomes a candidate (`AnswerCandidate`, unique per bot and
message) and its wake ends. Then whoever sees that no other bot of the chat is still judging that message makes
the pick: one transaction that locks the waiting candidates and writes the `Arbitration` row, unique per (chat,
message). Two workers finishing at once both try; the database lets one write it and the other finds nothing left
to decide. A candidate that arrives after the pick (its judge was slow) is arbitrated to the recorded winner. Of
two judges committing their candidacy at once, at least the later one sees the other's and settles, so a pick is
never left undone; a worker killed in between is covered by the beat (`candidacies_settle_stale`).

The rule (`feishu.channel.peers.answer_pick`) is deterministic over the candidates, not over who finished first.
An @all (G5 `respond_to_at_all`) names no judge: its pick is the first responding bot by slug, computed alike by
every bot's routing, and recorded the same way.
"""

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from agents.models import Bot, Turn
from agents.principals import DOOR_MESSAGE
from feishu.admission import admission_decide
from feishu.channel.discuss_context import discuss_transcript_note
from feishu.channel.peers import Candidate, Pick, answer_pick, chat_peer_bots, chat_policy
from feishu.channel.turn_channel import feishu_turn_start
from feishu.discuss.transcript import discuss_transcript_build
from feishu.discuss.wake import MAX_ATTEMPTS, discuss_wake_end
from feishu.inbound.messages import inbound_message_build
from feishu.inbound.parsing import message_parse
from feishu.models import AnswerCandidate, Arbitration, DiscussWake, InboundEvent
from probe.models import ProbeJudgement
from threadcontext.models import SessionBinding, ThreadEvent, Workspace
from threadcontext.selectors import workspace_cached_get

logger = logging.getLogger(__name__)

CANDIDATE_ERROR = "judged send: waiting for the pick of one answer (B3)"
ARBITRATED_ERROR = "arbitrated"
# A candidacy still waiting this long was left by a worker that died between its candidacy and the settle.
STALE_CANDIDACY_SECONDS = 60


def arbitration_applies(*, chat_id: str) -> bool:
    return chat_policy(chat_id=chat_id).answers == Workspace.DiscussAnswers.ONE


def wake_turn_start(*, bot: Bot, wake: DiscussWake) -> Turn | None:
    """The discuss turn of a wake: one turn for the wake's newest message (its contract is rebuilt from the
    judgement linked to the turn, P9). None when that message is not stored or its session was retired."""
    event = InboundEvent.objects.filter(bot=bot, message_id=wake.last_message_id).first()
    parsed = message_parse(event.payload) if event is not None else None
    if parsed is None:
        return None
    # U2, asked again when the wake fires: the chat's settings may have changed while it debounced.
    workspace = workspace_cached_get(bot_profile=bot.slug, chat_id=parsed.chat_id)
    admission = admission_decide(bot=bot, workspace=workspace, principal=parsed.principal, door=DOOR_MESSAGE)
    if not admission.allowed:
        logger.info("discuss turn refused", extra={"bot": bot.slug, "wake": wake.pk, "rule": admission.rule})
        return None
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot.feishu_bot_open_id)
    return feishu_turn_start(
        bot=bot, message=message, trigger=Turn.Trigger.DISCUSS, admission=admission, principal=parsed.principal
    )


def candidacy_enter(*, wake: DiscussWake, judgement: ProbeJudgement) -> bool:
    """The judge said send under the policy `one`: the bot becomes a candidate and its wake ends. False when an @
    absorbed the wake meanwhile (G4: that turn is the answer)."""
    with transaction.atomic():
        if not DiscussWake.objects.select_for_update().filter(pk=wake.pk, status=DiscussWake.Status.RUNNING).exists():
            return False
        AnswerCandidate.objects.get_or_create(
            bot=wake.bot,
            chat_id=wake.chat_id,
            message_id=wake.last_message_id,
            defaults={
                "wake": wake,
                "root_msg_id": wake.root_msg_id,
                "judgement_id": judgement.pk,
                "reason": judgement.reason,
            },
        )
        discuss_wake_end(wake=wake, status=DiscussWake.Status.DONE, error=CANDIDATE_ERROR)
    return True


def _still_judging(*, chat_id: str, root_msg_id: str, message_id: str) -> bool:
    """Whether some bot's wake holding this message has not finished judging it (pending, running, retrying)."""
    open_wakes = DiscussWake.objects.filter(
        Q(status__in=(DiscussWake.Status.PENDING, DiscussWake.Status.RUNNING))
        | Q(status=DiscussWake.Status.FAILED, attempts__lt=MAX_ATTEMPTS),
        chat_id=chat_id,
        root_msg_id=root_msg_id,
    ).values_list("message_ids", flat=True)
    return any(message_id in (ids or []) for ids in open_wakes)


def candidacies_settle(*, chat_id: str, root_msg_id: str) -> list[Arbitration]:
    """Make every pick of this thread that no judge is waiting for any more; the picks made."""
    waiting = (
        AnswerCandidate.objects.filter(
            chat_id=chat_id, root_msg_id=root_msg_id, outcome=AnswerCandidate.Outcome.WAITING
        )
        .values_list("message_id", flat=True)
        .distinct()
    )
    made = []
    for message_id in sorted(set(waiting)):
        if _still_judging(chat_id=chat_id, root_msg_id=root_msg_id, message_id=message_id):
            continue
        arbitration = arbitration_decide(chat_id=chat_id, root_msg_id=root_msg_id, message_id=message_id)
        if arbitration is not None:
            made.append(arbitration)
    return made


def candidacies_settle_stale(*, now: datetime | None = None) -> int:
    """The beat's catch-up: threads whose candidates wait past STALE_CANDIDACY_SECONDS get settled."""
    before = (now or timezone.now()) - timedelta(seconds=STALE_CANDIDACY_SECONDS)
    threads = set(
        AnswerCandidate.objects.filter(outcome=AnswerCandidate.Outcome.WAITING, created_at__lt=before).values_list(
            "chat_id", "root_msg_id"
        )
    )
    return sum(len(candidacies_settle(chat_id=chat, root_msg_id=root)) for chat, root in threads)


def _candidates_view(*, rows: list[AnswerCandidate], chat_id: str, root_msg_id: str) -> list[Candidate]:
    events = ThreadEvent.objects.filter(
        chat_id=chat_id,
        event_type=ThreadEvent.EventType.AGENT_OUTPUT,
        bot_profile__in=[row.bot.slug for row in rows],
    )
    if root_msg_id != SessionBinding.GROUP_SCOPE_KEY:
        events = events.filter(root_msg_id=root_msg_id)
    spoke = dict(events.values("bot_profile").annotate(newest=Max("id")).values_list("bot_profile", "newest"))
    return [
        Candidate(slug=row.bot.slug, name=row.bot.name, reason=row.reason, last_spoke_id=spoke.get(row.bot.slug, 0))
        for row in rows
    ]


def _message_text(*, chat_id: str, message_id: str) -> str:
    return (
        ThreadEvent.objects.filter(chat_id=chat_id, message_id=message_id).values_list("text", flat=True).first() or ""
    )


def arbitration_decide(*, chat_id: str, root_msg_id: str, message_id: str) -> Arbitration | None:
    """The one pick for a message, in one transaction; None when another worker made it (or nothing waits)."""
    with transaction.atomic():
        rows = list(
            AnswerCandidate.objects.select_for_update()
            .select_related("bot", "wake")
            .filter(chat_id=chat_id, message_id=message_id, outcome=AnswerCandidate.Outcome.WAITING)
            .order_by("bot__slug")
        )
        if not rows:
            return None
        existing = Arbitration.objects.filter(chat_id=chat_id, message_id=message_id).first()
        if existing is not None:  # late candidates: the message already has its answer
            _arbitrated(rows=rows, arbitration=existing)
            return None
        view = _candidates_view(rows=rows, chat_id=chat_id, root_msg_id=root_msg_id)
        pick = answer_pick(candidates=view, message_text=_message_text(chat_id=chat_id, message_id=message_id))
        try:
            with transaction.atomic():  # the claim: unique per (chat, message), whichever worker gets here
                arbitration = Arbitration.objects.create(
                    chat_id=chat_id,
                    root_msg_id=root_msg_id,
                    message_id=message_id,
                    rule=pick.rule,
                    reason=pick.reason,
                    candidates=[{"bot": c.slug, "name": c.name, "judge_reason": c.reason} for c in view],
                )
        except IntegrityError:
            return None
        winner = next(row for row in rows if row.bot.slug == pick.slug)
        _winner_start(winner=winner, arbitration=arbitration, pick=pick)
        _arbitrated(rows=[row for row in rows if row is not winner], arbitration=arbitration)
    logger.info(
        "discuss answer arbitrated",
        extra={"chat_id": chat_id, "message_id": message_id, "winner": pick.slug, "rule": pick.rule},
    )
    return arbitration


def _winner_start(*, winner: AnswerCandidate, arbitration: Arbitration, pick: Pick) -> None:
    turn = wake_turn_start(bot=winner.bot, wake=winner.wake)
    winner.outcome = AnswerCandidate.Outcome.PICKED
    winner.arbitration = arbitration
    winner.save(update_fields=["outcome", "arbitration"])
    arbitration.winner_bot = winner.bot
    arbitration.winner_turn = turn
    arbitration.save(update_fields=["winner_bot", "winner_turn"])
    if turn is None:
        return
    DiscussWake.objects.filter(pk=winner.wake_id).update(turn=turn, error=f"picked: {pick.reason}")
    # O5: the winner's turn sees the conversation its judge read (rebuilt now: the pick follows the last judge at
    # once, and no bot answered this message meanwhile, so it is the transcript the judge saw).
    transcript = discuss_transcript_build(bot=winner.bot, chat_id=winner.chat_id, root_msg_id=winner.root_msg_id)
    discuss_transcript_note(turn=turn, transcript=transcript)
    if winner.judgement_id is not None:  # the contract of the turn is rebuilt from the judgement linked to it (P9)
        ProbeJudgement.objects.filter(pk=winner.judgement_id).update(turn=turn, thread_id=turn.thread_id)


def _arbitrated(*, rows: list[AnswerCandidate], arbitration: Arbitration) -> None:
    """The others' outcomes: arbitrated, linked to the winner (its turn, when it started one)."""
    if not rows:
        return
    winner = arbitration.winner_bot.name if arbitration.winner_bot is not None else "another bot"
    turn = f" (turn {arbitration.winner_turn_id})" if arbitration.winner_turn_id else ""
    AnswerCandidate.objects.filter(pk__in=[row.pk for row in rows]).update(
        outcome=AnswerCandidate.Outcome.ARBITRATED, arbitration=arbitration
    )
    DiscussWake.objects.filter(pk__in=[row.wake_id for row in rows]).update(
        error=f"{ARBITRATED_ERROR}: {winner} answers{turn}", updated_at=timezone.now()
    )


def at_all_arbitrate(*, bot: Bot, chat_id: str, root_msg_id: str, message_id: str) -> bool:
    """B4 then B3 for an @all: whether this bot answers it. Every bot's routing computes the same pick (the first
    responding bot by slug); the pick is recorded once (unique per chat and message)."""
    if not arbitration_applies(chat_id=chat_id):
        return True
    responders = [
        peer
        for peer in chat_peer_bots(chat_id=chat_id)
        if (workspace := Workspace.objects.filter(bot_profile=peer.slug, chat_id=chat_id).first()) is not None
        and workspace.respond_to_at_all
        and workspace.reply_mode != "off"
    ]
    if len(responders) < 2:
        return True
    winner = responders[0]
    names = ", ".join(peer.name for peer in responders)
    try:
        with transaction.atomic():
            Arbitration.objects.get_or_create(
                chat_id=chat_id,
                message_id=message_id,
                defaults={
                    "root_msg_id": root_msg_id,
                    "winner_bot": winner,
                    "rule": "at_all_first_by_slug",
                    "reason": f"{winner.name} of {names}: an @all answered by the first responding bot by slug",
                    "candidates": [{"bot": peer.slug, "name": peer.name, "judge_reason": ""} for peer in responders],
                },
            )
    except IntegrityError:
        pass  # another bot's routing recorded the same pick a moment ago
    return winner.pk == bot.pk


def at_all_winner_turn_record(*, chat_id: str, message_id: str, turn: Turn) -> None:
    Arbitration.objects.filter(chat_id=chat_id, message_id=message_id, winner_bot_id=turn.bot_id).update(
        winner_turn=turn
    )
