"""Write-only secrets in the admin (providers, bots, MCP servers), for everyone, on every page.

A secret never leaves the database through a form: its field renders empty, a blank submission keeps the stored
value, ticking "clear" empties it. Elsewhere it is shown as "not set", "set" or "set (ends …wxyz)", never its
value (issue 30, finding 1). Django renders every field of `get_fieldsets` read-only, straight from the model, for
a user who may view a record and not change it: `WriteOnlySecretsAdmin` closes that path, replacing each secret
field by its `<name>_state` display and dropping its "clear" box. tests/security/test_admin_secrets.py holds
every registered admin of a model with an encrypted field to it.
"""

import json

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.fields import EncryptedTextField

SECRET_HELP_TEXT = _("Write-only: never shown. Leave blank to keep the current value.")
# The last characters are shown only for a value long enough that they give nothing useful away, so that an
# operator can tell which key is stored; a shorter value shows as "set".
SECRET_TAIL_CHARS = 4
SECRET_TAIL_MIN_LENGTH = 12


def secret_state(value: str) -> str:
    """A secret as words: "not set", "set", or "set (ends …wxyz)" for a value long enough to show its tail."""
    if not value:
        return gettext("not set")
    if len(value) < SECRET_TAIL_MIN_LENGTH:
        return gettext("set")
    return gettext("set (ends …%(tail)s)") % {"tail": value[-SECRET_TAIL_CHARS:]}


def secret_map_state(raw: str) -> str:
    """A JSON object of secrets (an MCP server's environment or headers): each name with its value's state."""
    if not raw:
        return gettext("not set")
    try:
        values = json.loads(raw)
    except ValueError:
        return secret_state(raw)
    if not isinstance(values, dict):
        return secret_state(raw)
    return "; ".join(f"{name}: {secret_state(str(value))}" for name, value in sorted(values.items()))


def encrypted_field_names(model) -> tuple[str, ...]:
    return tuple(field.name for field in model._meta.concrete_fields if isinstance(field, EncryptedTextField))


class WriteOnlySecretsAdmin(admin.ModelAdmin):
    """A ModelAdmin whose model's encrypted fields are never rendered, the read-only view included.

    Each secret needs a `<name>_state` display method on the admin (what the view-only page shows instead).
    """

    def secret_fields(self) -> tuple[str, ...]:
        return encrypted_field_names(self.model)

    def get_fieldsets(self, request: HttpRequest, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if self.has_change_permission(request, obj) if obj is not None else self.has_add_permission(request):
            return fieldsets
        return [(title, {**options, "fields": self.read_only_names(options["fields"])}) for title, options in fieldsets]

    def read_only_names(self, names) -> list:
        """The fieldset's names as a read-only page may show them: each secret as its state, no "clear" box."""
        secrets = self.secret_fields()
        hidden = {*secrets, *(f"{name}_clear" for name in secrets)}
        shown: list = []
        for name in names:
            if isinstance(name, list | tuple):
                shown.append(self.read_only_names(name))
            elif name in secrets and f"{name}_state" not in names:
                shown.append(f"{name}_state")
            elif name not in hidden:
                shown.append(name)
        return shown


class SecretField(forms.CharField):
    """A password input that never renders a value; blank means "keep the stored one"."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}))
        kwargs.setdefault("help_text", SECRET_HELP_TEXT)
        super().__init__(**kwargs)


class ClearSecretField(forms.BooleanField):
    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", _("Tick to remove the stored value."))
        super().__init__(**kwargs)


class SecretFieldsForm(forms.ModelForm):
    """A ModelForm whose `secret_fields` are SecretFields, each with a `<name>_clear` ClearSecretField."""

    secret_fields: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in self.secret_fields:
            # The stored secret never enters the form: blank initial, so "left blank" is also "unchanged".
            self.initial[name] = ""
            if name in self.fields:
                stored = getattr(self.instance, name) if self.instance.pk else ""
                self.fields[name].help_text = gettext("%(help)s Currently %(state)s.") % {
                    "help": SECRET_HELP_TEXT,
                    "state": secret_map_state(stored),
                }

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        for name in self.secret_fields:
            if cleaned.get(f"{name}_clear"):
                cleaned[name] = ""
            elif not cleaned.get(name):
                # Blank means "unchanged": keep what is stored (the form never had it to send back).
                cleaned[name] = getattr(self.instance, name) if self.instance.pk else ""
        return cleaned
