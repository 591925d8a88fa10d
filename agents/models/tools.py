"""A bot's MCP servers (M1) and the tool calls its turns made (M2).

Re-exported by agents.models, which Django and every caller use (`agents.models.McpServer`, `.TurnToolCall`).
Related models are named by label ("agents.Bot"): agents.models imports this module, so it cannot import them.
"""

from django.core.validators import RegexValidator
from django.db import models

from core.fields import EncryptedTextField


class McpServer(models.Model):
    """One MCP server a bot may use as tools (M1). Secrets (environment, headers) are encrypted, write-only."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a local command)"
        STREAMABLE_HTTP = "streamable_http", "Streamable HTTP (a URL)"

    class OnFailure(models.TextChoices):
        # Per server, not per bot: one bot may depend on its issue tracker and merely like a web search.
        CONTINUE = "continue", "Continue the turn without this server (the failure is recorded)"
        FAIL = "fail", "Fail the turn with a readable error"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(
        max_length=32,
        validators=[RegexValidator(r"^[a-z][a-z0-9_]*$", "Lower-case letters, digits and _, starting with a letter.")],
        help_text="Short name; the model sees tools as <name>__<tool>.",
    )
    transport = models.CharField(max_length=16, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the executable to start.")
    args = models.JSONField(default=list, blank=True, help_text='stdio: a JSON list of strings, e.g. ["-y", "x"].')
    # JSON objects of strings, encrypted at rest: API tokens live here.
    environment = EncryptedTextField(blank=True, help_text="stdio: extra environment variables (JSON object).")
    url = models.URLField(blank=True, max_length=500, help_text="streamable HTTP: the endpoint URL.")
    headers = EncryptedTextField(blank=True, help_text="streamable HTTP: request headers (JSON object).")
    allowed_tools = models.JSONField(
        default=list, blank=True, help_text="Tool names the bot may call (JSON list); empty: none."
    )
    # H1: tools of the allowlist that run only once a person allowed the call (a JSON list of tool names).
    approval_tools = models.JSONField(
        default=list, blank=True, help_text="Allowed tools that need a person's approval per call (JSON list)."
    )
    approval_timeout_seconds = models.PositiveIntegerField(
        default=600, help_text="Seconds a call waits for a decision; then it counts as denied."
    )
    is_enabled = models.BooleanField(default=True)
    on_failure = models.CharField(max_length=16, choices=OnFailure.choices, default=OnFailure.CONTINUE)
    # Null: the hub's settings (AMUX_TOOL_*). A turn uses the tightest value among the bot's enabled servers.
    call_timeout_seconds = models.FloatField(null=True, blank=True)
    max_steps = models.PositiveSmallIntegerField(null=True, blank=True)
    time_budget_seconds = models.FloatField(null=True, blank=True)
    last_test_ok = models.BooleanField(null=True, blank=True)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_error = models.TextField(blank=True)
    last_test_tools = models.JSONField(default=list, blank=True, help_text="[{name, description}] at the last test.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server"
        constraints = [models.UniqueConstraint(fields=["bot", "name"], name="mcpserver_unique_bot_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.transport})"


class TurnToolCall(models.Model):
    """One tool call of a turn and what came back (M2), recorded before the loop's next step.

    step 0 rows are set-up failures (a server that did not start); calls are steps 1..N, index in the step.
    """

    class Status(models.TextChoices):
        OK = "ok", "OK"
        ERROR = "error", "Error"
        REFUSED = "refused", "Refused (not allowed)"
        TIMEOUT = "timeout", "Timed out"
        DENIED = "denied", "Denied by a person (not run)"

    turn = models.ForeignKey("agents.Turn", on_delete=models.CASCADE, related_name="tool_calls")
    step = models.PositiveSmallIntegerField()
    index = models.PositiveSmallIntegerField()
    call_id = models.CharField(max_length=200, blank=True, help_text="The provider's id of the call.")
    server = models.CharField(max_length=32, blank=True)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.TextField(blank=True, help_text="What the model got back (storable, redacted, capped).")
    status = models.CharField(max_length=16, choices=Status.choices)
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn", "step", "index"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "step", "index"], name="turntoolcall_unique_turn_step_index")
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"


class ToolApproval(models.Model):
    """A call to a tool that needs approval (H1): the turn paused on it (`awaiting_approval`) until a decision.

    One per (turn, step, index), the slot the call has in the tool loop. `step_calls` keeps every call the model
    asked for in that step, so the resumed run finishes the step where it stopped. `arguments` are redacted.
    """

    turn = models.ForeignKey("agents.Turn", on_delete=models.CASCADE, related_name="approvals")
    step = models.PositiveSmallIntegerField()
    index = models.PositiveSmallIntegerField()
    call_id = models.CharField(max_length=200, blank=True)
    server = models.CharField(max_length=32)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict, blank=True)
    step_calls = models.JSONField(default=list, blank=True, help_text="The step's calls as the model asked.")
    requested_by = models.CharField(max_length=200, blank=True, help_text="Who started the turn.")
    # U5: where the call was asked, as the turn's channel says (agents.services.turns.channels.ApprovalPlace): the
    # chat whose owner may decide (a Feishu chat; empty for REST), and the part of the thread an "allow in this
    # conversation" grant covers (a Feishu topic or the main timeline: a group-scope session spans them all).
    chat_id = models.CharField(max_length=64, blank=True, help_text="The Feishu chat the call was asked in.")
    topic = models.CharField(max_length=100, blank=True, help_text="The topic of that chat it was asked in.")
    expires_at = models.DateTimeField()
    card_message_id = models.CharField(max_length=64, blank=True, help_text="The approval card in Feishu.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn", "step", "index"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "step", "index"], name="toolapproval_unique_turn_step_index")
        ]
        indexes = [models.Index(fields=["expires_at"], name="toolapproval_expires")]

    def __str__(self) -> str:
        return f"{self.server}__{self.tool} (turn {self.turn_id})"


class ToolApprovalDecision(models.Model):
    """The one decision on a ToolApproval: the one-to-one key is what makes the first decision win (H1)."""

    class Outcome(models.TextChoices):
        ALLOW_ONCE = "allow_once", "Allowed once"
        ALLOW_CONVERSATION = "allow_conversation", "Allowed in this conversation"
        DENY = "deny", "Denied"
        TIMEOUT = "timeout", "Denied: no decision in time"

    class Via(models.TextChoices):
        CARD = "card", "Feishu card"
        REST = "rest", "REST API"
        SWEEPER = "sweeper", "Timeout (sweeper)"

    approval = models.OneToOneField(ToolApproval, on_delete=models.CASCADE, related_name="decision")
    outcome = models.CharField(max_length=24, choices=Outcome.choices)
    via = models.CharField(max_length=16, choices=Via.choices)
    decided_by = models.CharField(max_length=200, blank=True, help_text="A Feishu open_id or a hub user name.")
    # The Feishu callback's event id: a replayed press finds it and changes nothing.
    event_id = models.CharField(max_length=64, blank=True)
    decided_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.outcome} by {self.decided_by or self.via}"

    @property
    def allows(self) -> bool:
        return self.outcome in (self.Outcome.ALLOW_ONCE, self.Outcome.ALLOW_CONVERSATION)
