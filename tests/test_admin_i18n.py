"""A3: every string of ours is translated into zh-hans and ja, and the compiled .mo files match the .po files.

`make messages-check` runs this file: makemessages over the source (into a copy of locale/), then no entry may be
untranslated or fuzzy, and each committed .mo must carry exactly the committed .po's translations. After adding
strings: `make messages`, translate the new entries in locale/*/LC_MESSAGES/django.po, `make messages` again.
"""

import shutil
from datetime import UTC, datetime
from pathlib import Path

import polib
import pytest
from django.core.management import call_command
from django.utils import formats, translation

from agents.models import Bot
from feishu.inbound.messages import HELP_TEXT, QUOTED_READ_FAILED_TEXT, bot_text

ROOT = Path(__file__).resolve().parents[1]
LOCALES = ["zh_Hans", "ja"]
MAKEMESSAGES_IGNORE = [".venv", "tests", "var", "staticfiles", "bench"]


def _entries(po) -> dict[str, str]:
    return {
        entry.msgid: entry.msgstr_plural.get(0, "") if entry.msgid_plural else entry.msgstr
        for entry in po
        if not entry.obsolete
    }


def test_a3_makemessages_leaves_no_untranslated_or_fuzzy_entry(tmp_path, settings, monkeypatch):
    # given: the committed catalogs, copied so that makemessages does not touch the tree. makemessages writes a
    # file's strings into the locale/ beside the directory it scans, whatever LOCALE_PATHS says, so it scans a
    # directory of links to the source folders whose locale/ is the copy.
    shutil.copytree(ROOT / "locale", tmp_path / "locale")
    for folder in ROOT.iterdir():
        if folder.is_dir() and not folder.name.startswith(".") and folder.name not in [*MAKEMESSAGES_IGNORE, "locale"]:
            (tmp_path / folder.name).symlink_to(folder, target_is_directory=True)
    settings.LOCALE_PATHS = [tmp_path / "locale"]
    monkeypatch.chdir(tmp_path)

    # when: the source is scanned again, as the integrator does after every merge
    call_command(
        "makemessages",
        locale=LOCALES,
        ignore_patterns=MAKEMESSAGES_IGNORE,
        no_obsolete=True,
        symlinks=True,
        verbosity=0,
    )

    # then
    problems = {}
    for locale in LOCALES:
        po = polib.pofile(str(tmp_path / "locale" / locale / "LC_MESSAGES" / "django.po"))
        untranslated = [entry.msgid for entry in po.untranslated_entries()]
        fuzzy = [entry.msgid for entry in po.fuzzy_entries()]
        if untranslated or fuzzy:
            problems[locale] = {"untranslated": untranslated, "fuzzy": fuzzy}
    assert problems == {}, "run `make messages` and translate: " + repr(problems)


@pytest.mark.parametrize("locale", LOCALES)
def test_a3_the_committed_mo_file_matches_its_po_file(locale):
    folder = ROOT / "locale" / locale / "LC_MESSAGES"
    po, mo = polib.pofile(str(folder / "django.po")), polib.mofile(str(folder / "django.mo"))

    assert {k: v for k, v in _entries(mo).items() if k} == {k: v for k, v in _entries(po).items() if k}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "first_line"),
    [
        ("en", "I am an amux agent bot."),
        ("zh-hans", "我是 amux 智能体机器人。"),
        ("ja", "amux のエージェントボットです。"),
    ],
)
def test_a3_the_bots_own_replies_speak_the_bots_language_whatever_the_process_speaks(language, first_line):
    # given: a bot set to a language, and a process (a worker, a request) speaking another one
    bot = Bot(language=language)

    # when
    with translation.override("ja" if language != "ja" else "zh-hans"):
        help_text = bot_text(bot=bot, text=HELP_TEXT)

    # then
    assert help_text.splitlines()[0] == first_line


def test_a3_the_quoted_message_notice_is_translated():
    assert bot_text(bot=Bot(language="zh-hans"), text=QUOTED_READ_FAILED_TEXT) == (
        "我无法读取你所回复的消息，因此没有提交你的请求。请重试。"
    )


@pytest.mark.parametrize("language", ["en", "zh-hans", "ja"])
def test_console_times_show_seconds_in_every_language(language):
    """Issue 27: queued, started and finished all read "8:35 a.m."; each is now to the second."""
    moment = datetime(2026, 12, 4, 8, 35, 7, tzinfo=UTC)
    with translation.override(language):
        assert formats.date_format(moment, "DATETIME_FORMAT") == "2026-12-04 08:35:07"
        assert formats.date_format(moment, "SHORT_DATETIME_FORMAT") == "2026-12-04 08:35:07"
