"""D1: how soon a deaf long connection is noticed and replaced, during a burst (issue 23).

The real `lark_oapi.ws.Client` against the websocket stub, on a temporary SQLite database (intake only: what is
measured is that every pushed event is stored once, not the turns it starts). This process holds the connection
in a thread, as a `feishu_connect` child does, and plays the supervisor: when `run()` ends deaf it starts the
replacement at once with the restart's reason, as LongConnectionSupervisor does.

A burst of BURST events is pushed at RATE per second; SILENT_AFTER seconds in, the stub goes silent (socket
open, no frames, no pongs). Reported per bound: detection (silence to `run()` ending deaf), recovery (silence to
every event acknowledged on the replacement), lost and duplicated events.
"""

import os
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURST = 200
RATE = 50.0
SILENT_AFTER = 1.5
BOUNDS = (3.0, 6.0)
MAX_SECONDS = 120


def run() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_deaf_"))
    sys.path.insert(0, str(ROOT))
    from tests.stubs.feishu_ws_server import FeishuWsStub

    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "amuxweb.settings.local",
            "DATABASE_URL": f"sqlite:///{work / 'hub.sqlite3'}",
            "AMUX_EMBEDDED_BROKER_FILE": str(work / "celery-broker.sqlite3"),
            "LOG_LEVEL": "ERROR",
        }
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from agents.models import Bot, LLMModel, Provider
    from feishu.inbound.longconn import DeafConnectionError, LongConnection
    from feishu.inbound.signing import message_event_payload
    from feishu.models import InboundEvent

    owner = get_user_model().objects.create(username="bench")
    echo = LLMModel.objects.create(provider=Provider.objects.create(name="local", kind="local_rules"), name="echo")
    for bound in BOUNDS:
        stub = FeishuWsStub(reconnect_nonce=0, reconnect_interval=1).start()
        settings.FEISHU_LONG_CONNECTION_DOMAIN = stub.url
        slug = f"deaf-{int(bound)}-{secrets.token_hex(2)}"
        bot = Bot.objects.create(
            slug=slug,
            name=slug,
            owner=owner,
            primary_model=echo,
            feishu_app_id=f"cli_{slug}",
            feishu_app_secret="secret",
            feishu_encrypt_key="key",
            feishu_verification_token="token",
            feishu_event_mode="long_connection",
        )
        stub.app_secrets[bot.feishu_app_id] = "secret"
        try:
            print(_round(stub, bot, bound, LongConnection, DeafConnectionError, InboundEvent, message_event_payload))
        finally:
            stub.stop()


# Long because one round's steps (burst, silence, detection, replacement, counting) read best in order.
def _round(stub, bot, bound, LongConnection, DeafConnectionError, InboundEvent, message_event_payload) -> str:  # noqa: N803
    ended: list[BaseException | None] = []

    def serve(connection) -> None:
        try:
            connection.run()
            ended.append(None)
        except BaseException as error:  # noqa: BLE001 - the bench reads what ended it
            ended.append(error)

    first = LongConnection(bot=bot, silence_seconds=bound)
    threading.Thread(target=serve, args=(first,), daemon=True).start()
    stub.wait_connections(1)
    frames: list[str] = []
    silent_at: list[float] = []

    def burst() -> None:
        started = time.monotonic()
        for index in range(BURST):
            if not silent_at and time.monotonic() - started >= SILENT_AFTER:
                stub.go_silent()
                silent_at.append(time.monotonic())
            payload = message_event_payload(
                verification_token=bot.feishu_verification_token,
                app_id=bot.feishu_app_id,
                message_id=f"om_{bot.slug}_{index:04d}",
                chat_id="oc_dm_bench",
                chat_type="p2p",
                text=f"message {index}",
            )
            frames.append(stub.push(payload))
            time.sleep(max(0.0, started + (index + 1) / RATE - time.monotonic()))

    pusher = threading.Thread(target=burst, daemon=True)
    pusher.start()
    deadline = time.monotonic() + MAX_SECONDS
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    detected = time.monotonic() - silent_at[0] if ended and silent_at else float("nan")
    deaf = bool(ended) and isinstance(ended[0], DeafConnectionError)
    second = LongConnection(bot=bot, silence_seconds=bound, reconnect_reason="replaced: deaf (bench)")
    threading.Thread(target=serve, args=(second,), daemon=True).start()
    pusher.join(timeout=MAX_SECONDS)
    stub.wait_acked(frames, timeout=max(1.0, deadline - time.monotonic()))
    recovered = time.monotonic() - silent_at[0]
    second.stop()
    stored = list(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True))
    lost = BURST - len(set(stored))
    duplicated = len(stored) - len(set(stored))
    return (
        f"bound {bound:g} s: deaf detected {detected:.2f} s after the silence (ended deaf: {deaf}); every event "
        f"acknowledged {recovered:.2f} s after it; {BURST} pushed at {RATE:g}/s, lost {lost}, duplicated {duplicated}"
    )
