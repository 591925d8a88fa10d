"""The workspace page's bot as a list to pick from (issue 27): a workspace stores its bot's slug, and threadcontext
may not import agents, so the console, which sees both, swaps the slug's text box for the bots the operator may
read. A workspace of a bot not in that list (a playground stand-in, a bot since removed) keeps its value."""

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agents.selectors import bot_list
from threadcontext.admin import WorkspaceAdmin
from threadcontext.models import Workspace


class WorkspaceBotSelectAdmin(WorkspaceAdmin):
    def get_form(self, request: HttpRequest, obj: Workspace | None = None, change: bool = False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        field = form.base_fields.get("bot_profile")
        if field is not None:  # absent when the page is read-only
            choices = [(bot.slug, f"{bot.name} ({bot.slug})") for bot in bot_list(user=request.user)]
            current = obj.bot_profile if obj is not None else ""
            if current and current not in {slug for slug, _label in choices}:
                choices.append((current, current))
            form.base_fields["bot_profile"] = forms.ChoiceField(
                choices=[("", "---------"), *choices],
                label=field.label,
                help_text=field.help_text,
            )
        return form


admin.site.unregister(Workspace)
admin.site.register(Workspace, WorkspaceBotSelectAdmin)
