"""D2: catch-up throughput, messages per second read with im.v1.message.list and stored (issue 23).

The real lark-oapi client against the Feishu REST stub, on a temporary SQLite database (the embedded default).
CHATS groups the bot heard from, MESSAGES missed messages in each (plain chatter, nothing addressed, so the
number is the read-and-store path, not turns), 50 per page. Reported: messages read, stored, seconds, and the
rate; then the same catch-up again, which starts from the newest message stored and reads only the last seconds.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHATS = 5
MESSAGES = 400  # per chat


def run() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_catchup_"))
    sys.path.insert(0, str(ROOT))
    from tests.stubs.feishu_server import FeishuStubServer

    feishu = FeishuStubServer().start()
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "amuxweb.settings.local",
            "DATABASE_URL": f"sqlite:///{work / 'hub.sqlite3'}",
            "AMUX_EMBEDDED_BROKER_FILE": str(work / "celery-broker.sqlite3"),
            "FEISHU_DOMAIN": feishu.url,
            "LOG_LEVEL": "ERROR",
        }
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from agents.models import Bot, LLMModel, Provider
    from feishu.inbound.catchup import catchup_run
    from threadcontext.models import ThreadEvent

    owner = get_user_model().objects.create(username="bench")
    echo = LLMModel.objects.create(provider=Provider.objects.create(name="local", kind="local_rules"), name="echo")
    bot = Bot.objects.create(
        slug="catchup",
        name="catchup",
        owner=owner,
        primary_model=echo,
        feishu_app_id="cli_catchup",
        feishu_app_secret="secret",
        feishu_encrypt_key="key",
        feishu_verification_token="token",
    )
    now_ms = int(time.time() * 1000)
    for chat in range(CHATS):
        chat_id = f"oc_bench_{chat}"
        ThreadEvent.objects.create(
            chat_id=chat_id,
            root_msg_id="om_root",
            message_id=f"om_root_{chat}",
            event_type="human_message",
            bridge_id=bot.bridge_id,
            bot_profile=bot.slug,
            text="earlier",
        )
        for index in range(MESSAGES):
            feishu.stub.add_message(
                message_id=f"om_{chat}_{index:05d}",
                chat_id=chat_id,
                text=f"message {index}",
                create_time_ms=now_ms - (MESSAGES - index) * 100,
                sender_id="ou_someone",
            )
    try:
        for label in ("first catch-up", "again (it starts from the newest stored message)"):
            result = catchup_run(bot=bot)
            rate = result.read / result.seconds if result.seconds else 0.0
            print(
                f"{label}: {result.read} read, {result.stored} stored in {result.chats} chats, "
                f"{result.seconds:.2f} s: {rate:.0f} messages/s read and stored"
            )
    finally:
        feishu.stop()
