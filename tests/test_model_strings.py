"""A3: every field name, help text and choice label of the hub's models is in core.model_strings (where
makemessages finds it) and is shown translated."""

from django.apps import apps
from django.utils import translation

from agents.models import Turn
from core.admin import HUB_APP_LABELS
from core.model_strings import MODEL_STRINGS
from probe.models import ProbeJudgement


def test_a3_every_model_string_is_listed_for_makemessages():
    # given
    strings: set[str] = set()
    for app_label in HUB_APP_LABELS:
        for model in apps.get_app_config(app_label).get_models():
            for field in model._meta.concrete_fields:
                strings.update(str(text) for text in (field.verbose_name, field.help_text) if text)
                strings.update(str(label) for _, label in field.choices or [])

    # when
    missing = sorted(strings - MODEL_STRINGS)

    # then
    assert missing == [], "add to core/model_strings.py, then `make messages` and translate:\n" + "\n".join(
        f"        gettext_noop({text!r})," for text in missing
    )


def test_a3_field_names_help_texts_and_choices_are_shown_in_the_operators_language():
    with translation.override("zh-hans"):
        assert str(Turn._meta.get_field("source_message_id").verbose_name) == "来源消息 ID"
        assert str(Turn._meta.get_field("user_message").help_text) == ""
        assert Turn(status=Turn.Status.DELIVERED).get_status_display() == "已送达"
    with translation.override("ja"):
        assert str(ProbeJudgement._meta.get_field("probe_model_name").verbose_name) == "プローブモデル名"
        assert ProbeJudgement(outcome="act").get_outcome_display() == "実行（送信）"
