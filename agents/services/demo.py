"""The demo data of the embedded default: an offline local_rules provider, two bots, two threads.

Idempotent: every row is found by its natural key and only created when missing, so running it again changes
nothing (and never overwrites what an operator edited since). Messages are written through message_create,
so the masks are the real ones: the chat thread shows every message in /history and /context, the
automation thread shows only its replies in /history and nothing in /context.
"""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from agents.models import Bot, LLMModel, Provider, Thread, UserProfile
from agents.services.threads import message_create, thread_create

DEMO_PROVIDER_NAME = "local"
DEMO_PRIMARY_MODEL = "local-echo"
DEMO_JUDGE_MODEL = "local-judge"
DEMO_USERNAME = "demo"
DEMO_CHAT_TITLE = "Demo chat"
DEMO_AUTOMATION_TITLE = "Demo automation: daily standup summary"

DEMO_CHAT_MESSAGES = [
    ("user_message", "What should we ship this week?", "Feishu user"),
    ("agent_reply", "(local echo) What should we ship this week?", "planner"),
    ("user_message", "And what can wait?", "Feishu user"),
    ("agent_reply", "(local echo) And what can wait?", "planner"),
]
DEMO_AUTOMATION_MESSAGES = [
    ("user_message", "Summarise yesterday's standup notes.", "automation"),
    ("agent_reply", "(local echo) Summarise yesterday's standup notes.", "planner"),
    ("user_message", "Summarise today's standup notes.", "automation"),
    ("agent_reply", "(local echo) Summarise today's standup notes.", "planner"),
]


@dataclass(frozen=True)
class DemoData:
    owner: AbstractBaseUser
    bots: list[Bot]
    chat_thread: Thread
    automation_thread: Thread


def _thread_with_messages(*, bot: Bot, runtime_mode: str, channel: str, title: str, messages: list) -> Thread:
    thread = Thread.objects.filter(bot=bot, runtime_mode=runtime_mode, title=title).order_by("id").first()
    if thread is not None:
        return thread
    thread = thread_create(bot=bot, runtime_mode=runtime_mode, channel=channel, title=title)
    for kind, content, author in messages:
        message_create(thread=thread, kind=kind, content=content, author=author)
    return thread


@transaction.atomic
def demo_seed() -> DemoData:
    provider, _ = Provider.objects.get_or_create(
        name=DEMO_PROVIDER_NAME, defaults={"kind": Provider.Kind.LOCAL_RULES, "timeout_seconds": 10.0}
    )
    primary, _ = LLMModel.objects.get_or_create(
        provider=provider,
        name=DEMO_PRIMARY_MODEL,
        defaults={"display_name": "Local echo (offline, rule-based)", "context_window": 32000},
    )
    judge, _ = LLMModel.objects.get_or_create(
        provider=provider,
        name=DEMO_JUDGE_MODEL,
        defaults={
            "display_name": "Local judge (offline, rule-based)",
            "context_window": 32000,
            "supports_tool_calls": True,
        },
    )
    owner, created = get_user_model().objects.get_or_create(
        username=DEMO_USERNAME, defaults={"email": "demo@example.com"}
    )
    if created:
        owner.set_unusable_password()
        owner.save(update_fields=["password"])
    UserProfile.objects.get_or_create(user=owner, defaults={"title_model": judge})

    bots = [
        Bot.objects.get_or_create(
            slug="planner",
            defaults={
                "name": "Planner",
                "owner": owner,
                "primary_model": primary,
                "system_prompt": "You plan work: short, concrete steps.",
                "group_reply_mode": Bot.GroupReplyMode.DISCUSS,
                "discuss_probe_mode": Bot.ProbeMode.INHERIT,
            },
        )[0],
        Bot.objects.get_or_create(
            slug="coder",
            defaults={
                "name": "Coder",
                "owner": owner,
                "primary_model": primary,
                "system_prompt": "You write and review code.",
                "group_reply_mode": Bot.GroupReplyMode.MENTION,
                "discuss_probe_mode": Bot.ProbeMode.MODEL,
                "discuss_probe_model": judge,
            },
        )[0],
    ]
    # Serialises two concurrent seed runs on the row lock, so the threads below are created once.
    planner = Bot.objects.select_for_update().get(pk=bots[0].pk)
    chat_thread = _thread_with_messages(
        bot=planner, runtime_mode="chat", channel="rest", title=DEMO_CHAT_TITLE, messages=DEMO_CHAT_MESSAGES
    )
    automation_thread = _thread_with_messages(
        bot=planner,
        runtime_mode="automation",
        channel="automation",
        title=DEMO_AUTOMATION_TITLE,
        messages=DEMO_AUTOMATION_MESSAGES,
    )
    return DemoData(owner=owner, bots=bots, chat_thread=chat_thread, automation_thread=automation_thread)
