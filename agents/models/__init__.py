"""Bots, LLM providers and models, threads and messages (with their visibility mask), turns.

Turns (agents.models.turns), automations (agents.models.automations) and MCP servers with their tool calls
(agents.models.tools) live in submodules and are re-exported here: Django and every caller use `agents.models.X`.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.models.automations import Automation
from agents.models.tools import McpServer, ToolApproval, ToolApprovalDecision, TurnToolCall
from agents.models.turns import Turn
from agents.models.voice import VoiceTranscription
from core.fields import EncryptedTextField

__all__ = [
    "Automation",
    "Bot",
    "LLMModel",
    "McpServer",
    "Message",
    "Provider",
    "Thread",
    "ToolApproval",
    "ToolApprovalDecision",
    "Turn",
    "TurnToolCall",
    "UserProfile",
    "VoiceTranscription",
]


class Provider(models.Model):
    class Kind(models.TextChoices):
        OPENAI_CHAT = "openai_chat", "OpenAI Chat Completions (and compatible)"
        OPENAI_RESPONSES = "openai_responses", "OpenAI Responses"
        ANTHROPIC = "anthropic", "Anthropic Messages"
        GEMINI = "gemini", "Google Gemini"
        LOCAL_RULES = "local_rules", "Local rules (offline, rule-based)"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    base_url = models.URLField(blank=True, help_text="Empty: the SDK's default endpoint.")
    api_key = EncryptedTextField(blank=True)
    timeout_seconds = models.FloatField(default=60.0)
    max_retries = models.PositiveSmallIntegerField(default=2, help_text="Retries the SDK itself makes.")
    is_enabled = models.BooleanField(default=True)
    # The last "Test connection" (agents.llm.registry.llm_connection_test): None until tested.
    last_test_ok = models.BooleanField(null=True, blank=True)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_detail = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class LLMModel(models.Model):
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200, help_text="The provider's model id.")
    display_name = models.CharField(max_length=200, blank=True)
    context_window = models.PositiveIntegerField(default=0, help_text="Tokens; 0 = undeclared.")
    max_output_tokens = models.PositiveIntegerField(default=4096)
    supports_tool_calls = models.BooleanField(default=False)
    supports_vision = models.BooleanField(default=False)
    is_enabled = models.BooleanField(default=True)
    # A7: prices per million tokens in price_currency; empty = not priced (its tokens are counted, never costed).
    input_price_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="Per million input tokens; empty: unpriced."
    )
    cached_input_price_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="Per million cached input tokens."
    )
    output_price_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="Per million output tokens."
    )
    price_currency = models.CharField(max_length=3, default="USD", help_text="ISO 4217 code: USD, CNY, ...")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "LLM model"
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="llmmodel_unique_provider_name")]

    def __str__(self) -> str:
        return self.display_name or self.name


class UserProfile(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="amux_profile")
    title_model = models.ForeignKey(
        LLMModel,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The account's cheap model; a discuss bot in 'inherit' probe mode judges with it.",
    )

    def __str__(self) -> str:
        return f"profile of {self.user}"


class Bot(models.Model):
    class GroupReplyMode(models.TextChoices):
        MENTION = "mention", "Only when @-mentioned or replied to"
        DISCUSS = "discuss", "Discuss: may speak on its own (probe gated)"

    class ReplyFormat(models.TextChoices):
        MARKDOWN_CARD = "markdown_card", "Markdown card (renders headings, lists, code)"
        TEXT = "text", "Plain text"

    class ProbeMode(models.TextChoices):
        INHERIT = "inherit", "Inherit (owner's title model)"
        OFF = "off", "Off (ungated)"
        MODEL = "model", "Model (the probe model below)"

    class QueueMode(models.TextChoices):
        # ARCHITECTURE §11.1 O2; what a person sees per mode: docs/architecture.md (Turns, queue modes).
        COLLECT = "collect", "Collect: the next turn answers everything that waited, in one reply"
        FOLLOWUP = "followup", "Follow-up: one turn per message, in order"
        STEER = "steer", "Steer: messages join the running turn at its next tool step, else like collect"

    class DmPolicy(models.TextChoices):
        # U2: who may use the bot in a direct message. Everyone the Feishu app is available to is the default: the
        # tenant's admin already limits that set (the app's availability), and a DM carries no authority beyond the
        # person's own (documents are read as them, U3; schedules are capped and re-checked, U4).
        EVERYONE = "everyone", "Everyone the app is available to"
        LISTED = "listed", "The people listed (and the owner)"
        OWNER = "owner", "Only the owner"

    class FeishuEventMode(models.TextChoices):
        WEBHOOK = "webhook", "Webhook (Feishu posts to a public URL)"
        LONG_CONNECTION = "long_connection", "Long connection (no public URL needed)"

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="bots")
    primary_model = models.ForeignKey(LLMModel, on_delete=models.PROTECT, related_name="+")
    system_prompt = models.TextField(blank=True)
    group_reply_mode = models.CharField(max_length=16, choices=GroupReplyMode.choices, default=GroupReplyMode.MENTION)
    discuss_probe_mode = models.CharField(max_length=16, choices=ProbeMode.choices, default=ProbeMode.INHERIT)
    discuss_probe_model = models.ForeignKey(
        LLMModel,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        # The judge must be able to call `decide` (P11): a model without tool calls would fail closed on every wake.
        # A provider kind without an adapter (written around the admin) is "unknown" and never listed either.
        limit_choices_to={
            "is_enabled": True,
            "supports_tool_calls": True,
            "provider__is_enabled": True,
            "provider__kind__in": ["openai_chat", "openai_responses", "anthropic", "gemini", "local_rules"],
        },
        help_text="The discuss probe's judge when the probe mode is 'model'. Clearing it returns to 'inherit'.",
    )
    # Issue 25 (K3): writes summaries of long conversations' trimmed items; empty: the probe model; neither: none.
    summary_model = models.ForeignKey(
        LLMModel,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Writes summaries of the oldest trimmed messages of long conversations; empty: the probe model.",
    )
    # Issue 26 (H3): voice messages are transcribed by this model (an OpenAI-compatible audio transcription
    # endpoint); empty: they stay the label `[audio: N s]`.
    transcription_model = models.ForeignKey(
        LLMModel,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        limit_choices_to={"provider__kind__in": ["openai_chat", "openai_responses"]},
        help_text=_("Transcribes voice messages (an OpenAI-compatible provider's model); empty: they stay a label."),
    )
    # Debounce of discuss wakes (P10); null = the hub's defaults.
    probe_debounce_initial_ms = models.PositiveIntegerField(null=True, blank=True)
    probe_debounce_max_ms = models.PositiveIntegerField(null=True, blank=True)
    # Feishu app credentials; secrets are encrypted at rest and never shown.
    feishu_app_id = models.CharField(max_length=64, blank=True, db_index=True)
    feishu_app_secret = EncryptedTextField(blank=True)
    feishu_encrypt_key = EncryptedTextField(blank=True)
    feishu_verification_token = EncryptedTextField(blank=True)
    # The bot's own open_id, read once from Feishu's bot info API (F6): tells @this-bot and echoes apart.
    feishu_bot_open_id = models.CharField(
        max_length=64,
        blank=True,
        help_text='Leave empty: the hub reads it from Feishu (bot/v3/info); "Verify" shows it',
    )
    # How Feishu delivers this app's events (G6): a webhook needs a public URL; a long connection is dialled out
    # by `manage.py feishu_connect` and needs none. Both store through the same handler and dedupe.
    feishu_event_mode = models.CharField(
        max_length=16,
        choices=FeishuEventMode.choices,
        default=FeishuEventMode.WEBHOOK,
        help_text="Webhook: Feishu posts to the bot's event URL, shown on its setup page (needs a public HTTPS URL). "
        "Long connection: the hub dials out to Feishu (no public URL; run `manage.py feishu_connect`, which "
        "`make run` starts).",
    )
    # How Feishu replies look (R2) and the receipt reactions (R1); emoji names are Feishu's emoji_type values.
    reply_format = models.CharField(max_length=16, choices=ReplyFormat.choices, default=ReplyFormat.MARKDOWN_CARD)
    # U2: the bot's owner as a Feishu user (open_id in this bot's app, or union_id): the person the DM policy
    # "owner" admits, who decides approvals in DMs and for whom the bot reads shared documents as itself (U3).
    feishu_owner_open_id = models.CharField(
        "owner's Feishu id",
        max_length=64,
        blank=True,
        help_text="The owner's open_id in this bot's Feishu app (ou_...) or union_id (on_...).",
    )
    dm_policy = models.CharField(
        "direct messages",
        max_length=16,
        choices=DmPolicy.choices,
        default=DmPolicy.EVERYONE,
        help_text="Who may use the bot in a direct message.",
    )
    dm_open_ids = models.JSONField(
        "people for direct messages",
        default=list,
        blank=True,
        help_text="Open ids (or union ids) of the people who may message the bot directly, for the listed policy.",
    )
    # One turn at a time per conversation (O1); what the messages that arrive while it runs become (O2).
    queue_mode = models.CharField(
        max_length=16,
        choices=QueueMode.choices,
        default=QueueMode.COLLECT,
        help_text="Messages sent to the bot while it is still answering in the same conversation.",
    )
    receipt_emoji = models.CharField(
        max_length=32,
        blank=True,
        default="OnIt",
        validators=[RegexValidator(r"^[A-Za-z_]+$", "A Feishu emoji_type such as OnIt.")],
        help_text="Reaction added to a message when its turn starts, removed on delivery. Empty: none.",
    )
    failure_emoji = models.CharField(
        max_length=32,
        blank=True,
        default="CrossMark",
        validators=[RegexValidator(r"^[A-Za-z_]+$", "A Feishu emoji_type such as CrossMark.")],
        help_text="Reaction that replaces the receipt when the turn fails. Empty: none.",
    )
    # The language of the bot's own fixed replies in chat (/help, "session ended", "could not read the quoted
    # message"); the model's answers are in whatever language the conversation is. One of settings.LANGUAGES.
    language = models.CharField(
        max_length=8,
        choices=[("en", "English"), ("zh-hans", "简体中文"), ("ja", "日本語")],
        default="en",
        help_text=_("The language of the bot's own replies in chat (/help, session ended, quoted message unreadable)."),
    )
    # The tool loop's limits for this bot (M2); null = the hub's AMUX_TOOL_* settings. A server may tighten them
    # further, and the time budget is always clamped to fit the Celery task's soft time limit (agents.tools.budget).
    tool_max_steps = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text=_("Most tool steps per turn. Empty: the hub's default.")
    )
    tool_time_budget_seconds = models.FloatField(
        null=True, blank=True, help_text=_("Total tool time per turn, in seconds. Empty: the hub's default.")
    )
    tool_call_timeout_seconds = models.FloatField(
        null=True, blank=True, help_text=_("One tool call's timeout, in seconds. Empty: the hub's default.")
    )
    is_enabled = models.BooleanField(default=True)
    # The playground's stand-in for a hub bot: every Feishu call it makes is answered on this machine by the
    # sandbox transport (feishu/outbound/sandbox.py) and it never holds a Feishu app secret, so nothing it says can
    # reach Feishu and no real chat's message can reach it.
    is_sandbox = models.BooleanField(
        _("playground stand-in"),
        default=False,
        editable=False,
        help_text=_("A playground stand-in: its Feishu calls are recorded on this machine, never sent."),
    )
    # The hub bot a stand-in answers for (issue 30, finding 2). A stand-in is found by this key, never by its slug,
    # so a real bot whose slug looks like a stand-in's is never taken over; the constraint keeps flag and key as one.
    sandbox_of = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="playground_stand_in",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(is_sandbox=False, sandbox_of__isnull=True)
                | models.Q(is_sandbox=True, sandbox_of__isnull=False),
                name="bot_stand_in_has_its_hub_bot",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Probe settings (P11): 'model' needs a model; clearing the model of a 'model' bot returns to inherit.
        The DM list (U2) is a JSON list of ids, stripped."""
        super().clean()
        people = self.dm_open_ids
        if not isinstance(people, list) or not all(isinstance(value, str) for value in people):
            raise ValidationError({"dm_open_ids": 'A JSON list of open ids, e.g. ["ou_1234"]; [] for none.'})
        self.dm_open_ids = [value.strip() for value in people if value.strip()]
        self.feishu_owner_open_id = self.feishu_owner_open_id.strip()
        if self.discuss_probe_mode != self.ProbeMode.MODEL or self.discuss_probe_model_id is not None:
            return
        had_model = self.pk is not None and Bot.objects.filter(pk=self.pk, discuss_probe_model__isnull=False).exists()
        if had_model:
            self.discuss_probe_mode = self.ProbeMode.INHERIT
            return
        raise ValidationError({"discuss_probe_model": "Choose a probe model for the 'model' probe mode."})

    @property
    def bridge_id(self) -> str:
        """Seed 002's bridge identity: the Feishu app id, or the slug for a bot without a Feishu app."""
        return self.feishu_app_id or self.slug

    @property
    def feishu_secrets(self) -> tuple[str, ...]:
        """The bot's Feishu secrets that are set: what no stored text, prompt or tool output may carry (C3)."""
        return tuple(
            secret
            for secret in (self.feishu_app_secret, self.feishu_encrypt_key, self.feishu_verification_token)
            if secret
        )

    @property
    def has_feishu_credentials(self) -> bool:
        """A sandbox bot never has them, whatever its fields hold: its calls are recorded, not sent (F5)."""
        return bool(self.feishu_app_id and self.feishu_app_secret) and not self.is_sandbox


class Thread(models.Model):
    class RuntimeMode(models.TextChoices):
        CHAT = "chat", "Chat"
        AUTOMATION = "automation", "Automation"

    class Channel(models.TextChoices):
        FEISHU = "feishu", "Feishu"
        REST = "rest", "REST"
        AUTOMATION = "automation", "Automation"

    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="threads")
    runtime_mode = models.CharField(max_length=16, choices=RuntimeMode.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # Feishu: "<chat_id>:<root_msg_id>" (topic scope) or "<chat_id>:group" (group scope); empty elsewhere.
    external_key = models.CharField(max_length=200, blank=True, db_index=True)
    title = models.CharField(max_length=200, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["bot", "-id"], name="thread_bot_newest")]

    def __str__(self) -> str:
        return self.title or f"thread {self.pk}"


class Message(models.Model):
    class Kind(models.TextChoices):
        USER_MESSAGE = "user_message", "User message"
        AGENT_REPLY = "agent_reply", "Agent reply"

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Derived from (thread.runtime_mode, kind) by agents.visibility; never supplied by a client (V4).
    visibility_mask = models.PositiveSmallIntegerField()
    content = models.TextField(help_text="What a person sees.")
    prompt = models.TextField(blank=True, help_text="What the model saw, when different from content.")
    author = models.CharField(max_length=200, blank=True)
    external_message_id = models.CharField(max_length=64, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Keyset pagination and context assembly both walk one thread by id.
        indexes = [models.Index(fields=["thread", "id"], name="message_thread_id")]

    def __str__(self) -> str:
        return f"{self.kind} {self.pk}"
