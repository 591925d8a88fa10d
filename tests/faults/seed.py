"""`python -m tests.faults.seed '<json>'`: the fault suite's bot in the suite's own database (run as a hub process).

The bot answers through the real OpenAI SDK at the LLM stub and replies through lark-oapi at the Feishu stub; its
keys come from the test, which signs and encrypts the events it posts with them (a long-connection bot's events
come through `manage.py feishu_connect` from the long-connection stub instead). Prints the bot's id.
"""

import json
import sys

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402

from agents.models import Bot, LLMModel, Provider  # noqa: E402


def fault_bot_create(
    *,
    slug: str,
    llm_base_url: str,
    app_id: str,
    app_secret: str,
    encrypt_key: str,
    token: str,
    event_mode: str = Bot.FeishuEventMode.WEBHOOK,
    queue_mode: str = Bot.QueueMode.COLLECT,
) -> Bot:
    owner, _ = get_user_model().objects.get_or_create(username="faults-owner")
    provider = Provider.objects.create(
        name=f"{slug}-llm",
        kind=Provider.Kind.OPENAI_CHAT,
        base_url=llm_base_url,
        api_key="sk-faults",
        max_retries=0,
        timeout_seconds=30,
    )
    model = LLMModel.objects.create(provider=provider, name="gpt-4o", display_name="gpt-4o", max_output_tokens=256)
    return Bot.objects.create(
        slug=slug,
        name=slug.title(),
        owner=owner,
        primary_model=model,
        feishu_app_id=app_id,
        feishu_app_secret=app_secret,
        feishu_encrypt_key=encrypt_key,
        feishu_verification_token=token,
        feishu_bot_open_id=f"ou_bot_{app_id}",
        feishu_event_mode=event_mode,
        queue_mode=queue_mode,
    )


if __name__ == "__main__":
    bot = fault_bot_create(**json.loads(sys.argv[1]))
    print(json.dumps({"bot_id": bot.pk}))
