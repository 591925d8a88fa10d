"""Firing a due discuss wake (P9): claim it, run the probe's judge, and on `send` start one turn.

Invariant: one worker fires a wake and a wake starts at most one turn. The claim is one conditional UPDATE
(claimable -> running, attempts + 1); the turn, the wake's end and the judgement's link to the turn commit in
one transaction, after re-reading that the wake is still running (an @ that absorbed it meanwhile is the one
answer, G4). A wake whose judge hit a provider fault is retried with backoff; after MAX_ATTEMPTS it stays
`failed` (with the error) and the bot's failing-closed judgements show in the admin.
"""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Bot, Thread, Turn
from feishu.channel.discuss_context import discuss_transcript_note
from feishu.channel.voice import voice_wake_transcribe
from feishu.discuss.arbitration import arbitration_applies, candidacies_settle, candidacy_enter, wake_turn_start
from feishu.discuss.transcript import discuss_transcript_build
from feishu.discuss.wake import MAX_ATTEMPTS, discuss_wake_end, discuss_wake_fire_enqueue, discuss_wakes_claimable
from feishu.models import DiscussWake
from probe.models import ProbeJudgement
from probe.selectors import gate_config_get
from probe.services import GateResult, probe_gate_run
from threadcontext.models import SessionBinding

logger = logging.getLogger(__name__)

RETRY_BACKOFF_SECONDS = (30, 120)  # after attempt 1, after attempt 2
# What discuss_wake_fire returns (for tests, logs and the bench).
FIRE_NOT_DUE = "not_due"
FIRE_NOT_CLAIMED = "not_claimed"
FIRE_SUPERSEDED = "superseded"
FIRE_DECLINED = "declined"
FIRE_RETRY = "retry_scheduled"
FIRE_FAILED = "failed"
FIRE_STARTED = "turn_started"
FIRE_NO_SOURCE = "no_source_message"
FIRE_CANDIDATE = "candidate"  # B3: judged send; the pick of one answer is made by whoever sees the last judge
FIRE_ABSORBED = "absorbed"  # an @ or reply to the bot answered the timeline while the judge ran (G4)


def discuss_activation_start(*, bot: Bot, wake: DiscussWake, gate: GateResult) -> Turn | None:
    """The hand-off to the bridge's turn (P9): one turn for the wake's newest message, with the contract.

    Activated by the judge: the activation contract (the judge's reason as advisory notes) is the last user
    message of the primary, rebuilt from the judgement the fire links to the turn. No gate at all (gate_ran
    False): the turn runs as it would without the feature.
    """
    return wake_turn_start(bot=bot, wake=wake)


def _claim(*, wake_id: int, now: datetime) -> bool:
    """A claimable wake → running, atomically (one conditional UPDATE): one worker fires a wake."""
    updated = DiscussWake.objects.filter(discuss_wakes_claimable(now=now), pk=wake_id).update(
        status=DiscussWake.Status.RUNNING, attempts=F("attempts") + 1, updated_at=now
    )
    return updated == 1


def discuss_wake_fire(*, wake_id: int, now: datetime | None = None) -> str:
    """Run the gate for a due wake and, on send (or no gate), start the turn; otherwise the wake ends."""
    now = now or timezone.now()
    if not _claim(wake_id=wake_id, now=now):
        wake = DiscussWake.objects.filter(pk=wake_id).first()
        if wake is not None and wake.status == DiscussWake.Status.PENDING and wake.due_at > now:
            discuss_wake_fire_enqueue(wake_id=wake.pk, eta=wake.due_at)  # extended since the task was queued
            return FIRE_NOT_DUE
        return FIRE_NOT_CLAIMED
    wake = DiscussWake.objects.select_related("bot").get(pk=wake_id)
    bot = wake.bot
    if wake.attempts > 1:
        newer = DiscussWake.objects.filter(
            bot=bot, chat_id=wake.chat_id, root_msg_id=wake.root_msg_id, created_at__gt=wake.created_at
        ).exclude(pk=wake.pk)
        if newer.exists():
            # A retry whose topic has a newer wake: that one judges the newer messages, one probe is enough.
            discuss_wake_end(wake=wake, status=DiscussWake.Status.DONE, error="superseded by a newer wake")
            return FIRE_SUPERSEDED
    # The configuration is cached (0 queries): a gate that will not judge needs no transcript read.
    will_judge = not gate_config_get(bot=bot).cause
    if will_judge:  # H3: the judge reads the wake's voice messages as their transcripts (once per bot, stored)
        voice_wake_transcribe(bot=bot, message_ids=list(wake.message_ids or []))
    transcript = (
        discuss_transcript_build(bot=bot, chat_id=wake.chat_id, root_msg_id=wake.root_msg_id) if will_judge else []
    )
    gate = probe_gate_run(
        bot=bot,
        transcript=transcript,
        thread=_session_thread(wake=wake),
        wake_id=wake.pk,
        topic=f"{wake.chat_id}:{wake.root_msg_id}",
    )
    if gate.retryable and wake.attempts < MAX_ATTEMPTS:
        backoff = timedelta(seconds=RETRY_BACKOFF_SECONDS[wake.attempts - 1])
        wake.due_at = now + backoff
        discuss_wake_end(wake=wake, status=DiscussWake.Status.FAILED, error=gate.judgement.error, extra=["due_at"])
        discuss_wake_fire_enqueue(wake_id=wake.pk, eta=wake.due_at)
        logger.warning(
            "discuss wake retry scheduled",
            extra={"bot_id": bot.pk, "wake_id": wake.pk, "attempts": wake.attempts, "due_at": wake.due_at.isoformat()},
        )
        return FIRE_RETRY
    if not gate.proceeds:
        if gate.retryable:  # the provider fault persisted through every attempt: failed closed, and visible
            discuss_wake_end(wake=wake, status=DiscussWake.Status.FAILED, error=gate.judgement.error)
            candidacies_settle(chat_id=wake.chat_id, root_msg_id=wake.root_msg_id)  # B3: others may wait for it
            return FIRE_FAILED
        discuss_wake_end(
            wake=wake, status=DiscussWake.Status.DONE, error="" if gate.outcome == "no_action" else gate.cause
        )
        candidacies_settle(chat_id=wake.chat_id, root_msg_id=wake.root_msg_id)  # B3: this judge may be the last
        return FIRE_DECLINED
    if arbitration_applies(chat_id=wake.chat_id):
        # B3: one answer per message: the bot is a candidate; whoever sees the last judge finish makes the pick.
        if not candidacy_enter(wake=wake, judgement=gate.judgement):
            return FIRE_ABSORBED
        picks = candidacies_settle(chat_id=wake.chat_id, root_msg_id=wake.root_msg_id)
        # This fire made the pick (and started the winner's turn, maybe another bot's), or left it to a later one.
        return FIRE_STARTED if any(pick.winner_turn_id for pick in picks) else FIRE_CANDIDATE
    with transaction.atomic():
        # An @ or reply answered this timeline while the judge ran (G4): that turn is the one answer.
        if not DiscussWake.objects.select_for_update().filter(pk=wake.pk, status=DiscussWake.Status.RUNNING).exists():
            return FIRE_ABSORBED
        # The turn, its wake and its judgement commit together (the turn is enqueued, and any notice sent, only
        # after): a turn the sweeper re-queues always finds the judgement its contract is rebuilt from (P9).
        turn = discuss_activation_start(bot=bot, wake=wake, gate=gate)
        if turn is None:
            # the wake's message is not stored, or its session was retired (the user was told to start anew)
            discuss_wake_end(wake=wake, status=DiscussWake.Status.DONE, error="no turn started")
            return FIRE_NO_SOURCE
        # O5: the primary sees what the judge saw (an ungated bot: what a judge would have seen).
        seen = transcript or discuss_transcript_build(bot=bot, chat_id=wake.chat_id, root_msg_id=wake.root_msg_id)
        discuss_transcript_note(turn=turn, transcript=seen)
        wake.turn = turn
        discuss_wake_end(wake=wake, status=DiscussWake.Status.DONE, error="", extra=["turn"])
        ProbeJudgement.objects.filter(pk=gate.judgement.pk).update(turn=turn, thread_id=turn.thread_id)
    return FIRE_STARTED


def _session_thread(*, wake: DiscussWake) -> Thread | None:
    """The topic's live session thread, if one exists yet: the gate's log and row carry it as session_id."""
    thread_id = (
        SessionBinding.objects.filter(
            bot_profile=wake.bot.slug, chat_id=wake.chat_id, scope_key=wake.root_msg_id, retired_at__isnull=True
        )
        .values_list("agent_thread_id", flat=True)
        .first()
    )
    return Thread.objects.filter(pk=thread_id).first() if thread_id is not None else None
