"""The bridge's durable state: the webhook's outbox, debounced discuss wakes, outbound deliveries."""

from django.db import models
from django.db.models import Q


class InboundEvent(models.Model):
    """What the webhook stored before answering 200: the transactional outbox of Feishu intake."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        PROCESSING = "processing", "Processing"
        DONE = "done", "Done"
        IGNORED = "ignored", "Ignored"
        FAILED = "failed", "Failed"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="inbound_events")
    event_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=64)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    # When a worker claimed it (pending -> processing); a claim older than the sweeper's limit is stale.
    claimed_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Feishu retries and replays under new event_ids; message_id per bot is the real identity (F2).
            models.UniqueConstraint(fields=["bot", "message_id"], name="inboundevent_unique_bot_message"),
        ]
        indexes = [
            models.Index(fields=["received_at"], condition=Q(status="pending"), name="inboundevent_pending"),
            # Issue 11: the sweeper's look for claims left by a killed worker (every 30 s) walked the whole table.
            models.Index(fields=["claimed_at"], condition=Q(status="processing"), name="inboundevent_processing"),
            models.Index(fields=["received_at"], name="inboundevent_received"),  # the daily retention prune
            # issue 30 (9): the store refuses a second message under an event_id it has seen
            models.Index(fields=["bot", "event_id"], name="inboundevent_bot_event"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id} ({self.status})"


class DiscussWake(models.Model):
    """A debounced wake of a discuss-mode bot for one (chat, topic): a burst of messages becomes one probe."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (debouncing)"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="discuss_wakes")
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    message_ids = models.JSONField(default=list)
    last_message_id = models.CharField(max_length=64)
    first_message_at = models.DateTimeField()
    due_at = models.DateTimeField(help_text="When the probe runs unless another message extends it.")
    deadline_at = models.DateTimeField(help_text="The debounce never extends past this.")
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    # When the beat sweeper last enqueued a fire task for it: a busy queue is not flooded with copies every 5 s.
    swept_at = models.DateTimeField(null=True, blank=True)
    turn = models.ForeignKey("agents.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # One open (debouncing) wake per bot and topic, whichever worker sees the message.
            models.UniqueConstraint(
                fields=["bot", "chat_id", "root_msg_id"],
                condition=Q(status="pending"),
                name="discusswake_unique_pending_topic",
            ),
        ]
        indexes = [models.Index(fields=["status", "due_at"], name="discusswake_status_due")]

    def __str__(self) -> str:
        return f"wake {self.pk} {self.chat_id}/{self.root_msg_id} ({self.status})"


class OutboundDelivery(models.Model):
    """One message the hub sends to Feishu; its uuid makes a retried send idempotent on Feishu's side (F3)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        RECORDED = "recorded", "Recorded (bot has no Feishu credentials)"
        FAILED = "failed", "Failed"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="deliveries")
    turn = models.ForeignKey("agents.Turn", null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    chat_id = models.CharField(max_length=64)
    reply_to_message_id = models.CharField(max_length=64, blank=True)
    reply_in_thread = models.BooleanField(default=False)
    chunk_index = models.PositiveSmallIntegerField(default=0)
    uuid = models.CharField(max_length=64, unique=True)
    msg_type = models.CharField(max_length=16, default="text")
    content = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    feishu_message_id = models.CharField(max_length=64, blank=True, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Not a column: true on a row just inserted with its first attempt counted (a reply sent right after its row
    # is written, issue 28), so that `delivery_send` does not count that attempt a second time.
    attempt_counted = False

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["turn", "chunk_index"], name="delivery_unique_turn_chunk"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.uuid} ({self.status})"


class FeishuConnection(models.Model):
    """The long connection of one bot's Feishu app (G6), as `manage.py feishu_connect` last saw it.

    One row per bot, written by the bot's connection child process (several hub nodes may each hold a
    connection of the same app; the row then shows whichever wrote last). Read-only in the admin.
    """

    class State(models.TextChoices):
        CONNECTING = "connecting", "Connecting"
        CONNECTED = "connected", "Connected"
        RECONNECTING = "reconnecting", "Reconnecting"
        DEAF = "deaf", "Deaf (connected, hearing nothing)"
        STOPPED = "stopped", "Stopped"
        FAILED = "failed", "Failed"

    bot = models.OneToOneField("agents.Bot", on_delete=models.CASCADE, related_name="feishu_connection")
    state = models.CharField(max_length=16, choices=State.choices, default=State.CONNECTING)
    connected_since = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    events_received = models.PositiveIntegerField(default=0)
    reconnects = models.PositiveIntegerField(default=0, help_text="Reconnections since the process started.")
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    hostname = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # D1: since when a connected connection has heard nothing (its last frame), while its state is deaf.
    deaf_since = models.DateTimeField(null=True, blank=True)
    last_reconnect_at = models.DateTimeField(null=True, blank=True)
    last_reconnect_reason = models.CharField(max_length=300, blank=True)
    # The last transitions, oldest first, each {"at", "state", "note"} (bounded: connection_state.HISTORY_MAX_ENTRIES).
    history = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"{self.bot_id}: {self.state}"


class SendBudgetBucket(models.Model):
    """One token bucket of the send budget (R4) on the embedded default (no Redis): per chat or per app.

    Changed only by a compare-and-swap on `version` (feishu.outbound.budget), so two workers never
    both spend the last token.
    """

    key = models.CharField(max_length=160, unique=True)
    tokens = models.FloatField()
    refilled_at = models.FloatField()  # epoch seconds of the last refill
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return self.key


class HubHeartbeat(models.Model):
    """One row: when a worker of the hub last ran (D2, issue 23). The inbound sweeper stamps it every run; a
    worker that starts and finds it older than AMUX_BACKFILL_AFTER_SECONDS claims the catch-up by moving the
    stamp with a conditional UPDATE (feishu.inbound.hub_start), so one start of several workers catches up once.
    """

    alive_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"alive at {self.alive_at:%Y-%m-%d %H:%M:%S}"


class CatchupRun(models.Model):
    """One catch-up of a bot (D2), recorded when it is triggered, before its task is queued: where the reading
    starts is fixed here, and a catch-up whose task the broker refused or lost is queued again by the inbound
    sweeper (feishu.inbound.catchup.catchups_sweep), so a gap is read even when the trigger met a broker outage
    or its worker died. Finished when its task ran: what it read and stored, or why it could not."""

    class Trigger(models.TextChoices):
        RECONNECT = "reconnect", "Long connection back after a gap"
        HUB_START = "hub_start", "Hub started after an outage"
        OPERATOR = "operator", "An operator's catch up action"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="catchups")
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    since = models.DateTimeField(help_text="Where the reading starts: Feishu's messages sent from then on are read.")
    requested_at = models.DateTimeField(auto_now_add=True)
    # When its task was last handed to the broker (None: not yet, or the broker refused it).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # How many times the sweeper queued it again (bounded: feishu.inbound.catchup.CATCHUP_MAX_SWEEPS).
    sweeps = models.PositiveSmallIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    chats = models.PositiveIntegerField(default=0)
    read = models.PositiveIntegerField(default=0)
    stored = models.PositiveIntegerField(default=0)
    # U7: listed items that claimed another chat than the one asked for: dropped, never stored or answered.
    dropped = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["requested_at"], condition=Q(finished_at__isnull=True), name="catchup_open_idx"),
            models.Index(fields=["bot", "-requested_at"], name="catchup_bot_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"catch-up {self.pk} of bot {self.bot_id} ({self.trigger})"


class SandboxCall(models.Model):
    """One Feishu call of a sandbox bot, answered and recorded on this machine (feishu/outbound/sandbox.py)."""

    app_id = models.CharField(max_length=64, db_index=True, help_text="The sandbox bot's bridge id.")
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=300)
    body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["app_id", "id"], name="sandboxcall_app")]

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


class FeishuCredentialCheck(models.Model):
    """The last check of a bot's Feishu app against Feishu (A6): a tenant token and the bot's info fetched with
    its app id and secret, on save, on the bot page's "verify" and periodically. One row per bot."""

    bot = models.OneToOneField("agents.Bot", on_delete=models.CASCADE, related_name="feishu_credential_check")
    ok = models.BooleanField()
    checked_at = models.DateTimeField()
    detail = models.CharField(max_length=500, blank=True)
    # What bot/v3/info answered when it did: the app's name and the bot's open_id as Feishu knows them.
    app_name = models.CharField(max_length=200, blank=True)
    open_id = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"{self.bot_id}: {'ok' if self.ok else 'refused'} at {self.checked_at:%Y-%m-%d %H:%M:%S}"


class AnswerCandidate(models.Model):
    """B3: a discuss bot whose judge said send for one message, in a chat whose policy is one answer per message.

    It waits here until no other bot of the chat is still judging that message; then one worker makes the pick
    (`Arbitration`, unique per message) and every candidate's outcome says picked or arbitrated.
    """

    class Outcome(models.TextChoices):
        WAITING = "waiting", "Waiting for the pick"
        PICKED = "picked", "Picked"
        ARBITRATED = "arbitrated", "Arbitrated (another bot answers)"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="answer_candidacies")
    wake = models.ForeignKey(DiscussWake, on_delete=models.CASCADE, related_name="candidacies")
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64, help_text="The message the bot would answer.")
    # The judge's row (probe never imports the bridge and the row outlives nothing here: a plain id).
    judgement_id = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.WAITING)
    arbitration = models.ForeignKey(
        "Arbitration", null=True, blank=True, on_delete=models.SET_NULL, related_name="candidacies"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "chat_id", "message_id"], name="answercandidate_unique_bot_message"),
        ]
        indexes = [models.Index(fields=["chat_id", "root_msg_id", "outcome"], name="answercandidate_waiting")]

    def __str__(self) -> str:
        return f"candidate {self.bot_id} for {self.message_id} ({self.outcome})"


class Arbitration(models.Model):
    """B3: the one recorded pick of the bot that answers a message; unique per (chat, message), so of two workers
    deciding at once exactly one writes it, whatever the timing."""

    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64)
    winner_bot = models.ForeignKey("agents.Bot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    winner_turn = models.ForeignKey("agents.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rule = models.CharField(max_length=32, help_text="Which step of the rule decided.")
    reason = models.TextField(blank=True)
    candidates = models.JSONField(default=list, help_text="Every candidate as the rule saw it.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat_id", "message_id"], name="arbitration_unique_chat_message"),
        ]

    def __str__(self) -> str:
        return f"arbitration {self.chat_id}/{self.message_id}"


class WebhookRefusal(models.Model):
    """How many webhook requests were refused for one bot and reason (D3), and when the last one was.

    Bounded: one row per bot and reason (and one per reason for slugs that name no bot), counted with an UPDATE
    on an F() expression, so any number of workers add to it without losing a count. Nothing of the refused
    request is kept: a refused body is an outsider's text.
    """

    class Reason(models.TextChoices):
        BAD_SIGNATURE = "bad_signature", "Bad signature"
        STALE = "stale", "Stale timestamp"
        WRONG_TOKEN = "wrong_token", "Wrong verification token"
        UNDECRYPTABLE = "undecryptable", "Undecryptable body"
        MALFORMED = "malformed", "Malformed or oversized body"
        UNKNOWN_BOT = "unknown_bot", "Unknown, disabled or webhook-less bot"

    # Null: a slug that names no bot (each such slug is not kept: it is whatever an outsider typed).
    bot = models.ForeignKey(
        "agents.Bot", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_refusals"
    )
    reason = models.CharField(max_length=16, choices=Reason.choices)
    count = models.PositiveBigIntegerField(default=0)
    first_at = models.DateTimeField(auto_now_add=True)
    last_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "reason"], condition=Q(bot__isnull=False), name="webhookrefusal_unique_bot_reason"
            ),
            models.UniqueConstraint(
                fields=["reason"], condition=Q(bot__isnull=True), name="webhookrefusal_unique_nobot_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.bot_id or '-'} {self.reason}: {self.count}"
