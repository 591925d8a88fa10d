"""Write-only secret fields for the admin's forms (providers, bots, MCP servers).

A secret never leaves the database through a form: its field renders empty, a blank submission keeps the stored
value, ticking "clear" empties it, and lists show only "set" / "not set".
"""

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

SECRET_HELP_TEXT = _("Write-only: never shown. Leave blank to keep the current value.")


def secret_state(value: object) -> str:
    """ "set" or "not set": whether a secret (or a mapping of them) is stored, never what it is."""
    return gettext("set") if value else gettext("not set")


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
                is_set = bool(self.instance.pk and getattr(self.instance, name))
                self.fields[name].help_text = gettext("%(help)s Currently %(state)s.") % {
                    "help": SECRET_HELP_TEXT,
                    "state": secret_state(is_set),
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
