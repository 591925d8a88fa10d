# The agents admin is split by topic; importing the modules registers their ModelAdmins.
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agents import models
from agents.admin import approvals, bots, mcp, providers, threads, tokens, turns, voice  # noqa: F401
from core.admin import model_names, model_strings_translate

# The console's name, in the operator's language (the agents admin loads first of the hub's apps).
admin.site.site_header = _("amuxweb console")
admin.site.site_title = _("amuxweb console")
admin.site.index_title = _("Site administration")
model_strings_translate()

for model, singular, plural in [
    (models.Provider, _("provider"), _("providers")),
    (models.LLMModel, _("LLM model"), _("LLM models")),
    (models.UserProfile, _("user profile"), _("user profiles")),
    (models.Bot, _("bot"), _("bots")),
    (models.Thread, _("thread"), _("threads")),
    (models.Message, _("message"), _("messages")),
    (models.Turn, _("turn"), _("turns")),
    (models.Automation, _("automation"), _("automations")),
    (models.McpServer, _("MCP server"), _("MCP servers")),
    (models.ToolApproval, _("tool approval"), _("tool approvals")),
    (models.ToolApprovalDecision, _("approval decision"), _("approval decisions")),
    (models.VoiceTranscription, _("voice transcription"), _("voice transcriptions")),
]:
    model_names(model, singular, plural)
