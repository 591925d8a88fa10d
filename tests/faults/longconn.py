"""The fault suite's long connection (issue 23): `manage.py feishu_connect` as a hub process against the
long-connection stub (tests/stubs/feishu_ws_server.py), for one bot whose event mode is the long connection.

Each message is said the way Feishu has it, twice over: kept in its chat's history, which im.v1.message.list reads
(the Feishu REST stub's `add_message`, before the push, as Feishu stores a message before it pushes it), and pushed
over the connection. The stub keeps nothing it could not deliver (`keeps_undelivered = False`: issue 23's long
connection has no redelivery of what was never delivered), so a message said while the connection is deaf reaches
the hub only through the catch-up its replacement connection triggers.
"""

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from feishu.inbound.signing import mention_entry, message_event_payload
from tests.faults.conftest import FaultBot, Hub
from tests.faults.servers import HubProcess, wait_until
from tests.stubs.feishu_ws_server import FeishuWsStub

# The ClientConfig the stub hands out: no jitter, and the SDK retries a refused upgrade after this long.
RECONNECT_INTERVAL_SECONDS = 1
CHATS = 4  # the first CHATS messages open one chat each: the catch-up reads the chats the bot has heard from
MENTION_EVERY = 2  # every other message @-s the bot
CONNECT_TIMEOUT_SECONDS = 60  # feishu_connect's first connection (its imports, on a busy 2-core machine)


@dataclass(frozen=True)
class Said:
    message_id: str
    mentions_bot: bool
    while_deaf: bool  # said after the silence began and before the replacement connection was seen


@dataclass
class Burst:
    said: list[Said] = field(default_factory=list)
    silent_at: float = 0.0  # monotonic
    silent_wall: float = 0.0  # time.time(), to compare with the state row's history
    reconnected_seconds: float = 0.0  # from the silence to the replacement connection's upgrade
    at_reconnect: object = None  # what the burst's `at_reconnect` said when it saw the replacement connection

    @property
    def mentions(self) -> set[str]:
        return {said.message_id for said in self.said if said.mentions_bot}


class LongConnectionHub:
    """The long-connection stub (here) and `manage.py feishu_connect --bot <slug>` (a hub process) for one bot."""

    def __init__(self, *, hub: Hub, bot: FaultBot, silence_seconds: float) -> None:
        self.hub, self.bot = hub, bot
        self.ws = FeishuWsStub(
            app_secrets={bot.app_id: bot.app_secret},
            reconnect_nonce=0,
            reconnect_interval=RECONNECT_INTERVAL_SECONDS,
        )
        self.ws.keeps_undelivered = False
        self.process = HubProcess(
            name="feishu-connect",
            command=[sys.executable, "manage.py", "feishu_connect", "--bot", bot.slug],
            env={
                **hub.env,
                "FEISHU_LONG_CONNECTION_DOMAIN": self.ws.url,
                "AMUX_LONGCONN_SILENCE_SECONDS": str(silence_seconds),
            },
            directory=hub.logs,
            ready="",  # ready is the stub's first accepted connection
        )

    def __enter__(self) -> "LongConnectionHub":
        self.ws.start()
        self.process.launch()
        try:
            wait_until(self._connected, what="feishu_connect's first connection", timeout=CONNECT_TIMEOUT_SECONDS)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop()  # SIGTERM to its process group: the supervisor and its child
        self.ws.stop()

    def _connected(self) -> bool:
        if not self.process.is_running():
            raise RuntimeError(f"feishu_connect exited; log:\n{self.process.tail()}")
        return self.ws.connections_accepted >= 1

    def tails(self) -> str:
        return f"{self.hub.tails()}\n--- feishu-connect log:\n{self.process.tail(40)}"

    # --- Feishu's side -----------------------------------------------------------------------------------------
    def say(self, *, index: int, while_deaf: bool) -> Said:
        """One group message (every MENTION_EVERY-th @-s the bot): into its chat's history, then pushed."""
        slug, mentions_bot = self.bot.slug, index % MENTION_EVERY == 0
        payload = message_event_payload(
            verification_token=self.bot.verification_token,
            app_id=self.bot.app_id,
            message_id=f"om_{slug}_{index:04d}",
            chat_id=f"oc_{slug}_{index % CHATS}",
            text=f"@_user_1 question {index}" if mentions_bot else f"remark {index}",
            sender_open_id=f"ou_user_{index % 5}",
            mentions=[mention_entry(index=1, open_id=self.bot.open_id, name=slug.title())] if mentions_bot else None,
        )
        message = payload["event"]["message"]
        self.hub.feishu.add_message(
            message_id=message["message_id"],
            chat_id=message["chat_id"],
            text=f"@_user_1 question {index}" if mentions_bot else f"remark {index}",
            sender_id=payload["event"]["sender"]["sender_id"]["open_id"],
            create_time_ms=int(message["create_time"]),
            mentions=[{"key": "@_user_1", "id": self.bot.open_id, "id_type": "open_id", "name": slug.title()}]
            if mentions_bot
            else None,
        )
        self.ws.push(payload)
        return Said(message_id=message["message_id"], mentions_bot=mentions_bot, while_deaf=while_deaf)

    def burst(
        self,
        *,
        per_second: float,
        before: int,
        after: int,
        refused: int,
        recovery_timeout: float,
        at_reconnect: Callable[[], object] = lambda: None,
    ) -> Burst:
        """`before` messages; then the fault: the stub refuses the next `refused` websocket upgrades and its
        connection goes silent (open, no frames, no pongs); messages go on until the replacement connection is
        up (at most `recovery_timeout`; `at_reconnect` is called then), then `after` more. All at `per_second`."""
        burst, interval = Burst(), 1.0 / per_second

        def say(*, while_deaf: bool) -> None:
            burst.said.append(self.say(index=len(burst.said), while_deaf=while_deaf))
            time.sleep(interval)

        for _ in range(before):
            say(while_deaf=False)
        self.ws.refuse_handshakes(refused)
        self.ws.go_silent()
        burst.silent_at, burst.silent_wall = time.monotonic(), time.time()
        while self.ws.connections_accepted < 2:
            if time.monotonic() - burst.silent_at > recovery_timeout:
                raise AssertionError(f"no replacement connection within {recovery_timeout:.0f} s\n{self.tails()}")
            say(while_deaf=True)
        burst.reconnected_seconds = time.monotonic() - burst.silent_at
        burst.at_reconnect = at_reconnect()
        for _ in range(after):
            say(while_deaf=False)
        return burst

    # --- the hub's side (its database, the Feishu stub) ---------------------------------------------------------
    def stored(self) -> Counter:
        rows = self.hub.query(
            "SELECT message_id, count(*) FROM feishu_inboundevent "
            "WHERE bot_id = %s AND event_type = 'im.message.receive_v1' GROUP BY message_id",
            (self.bot.bot_id,),
        )
        return Counter(dict(rows))

    def stored_by_catchup(self) -> int:
        rows = self.hub.query(
            "SELECT count(*) FROM feishu_inboundevent WHERE bot_id = %s AND payload -> 'amux' ->> 'backfilled' = 'true'",
            (self.bot.bot_id,),
        )
        return rows[0][0]

    def replies(self) -> Counter:
        return self.hub.feishu.replies_by_parent(app_id=self.bot.app_id)

    def deaf_detected_seconds(self, *, silent_wall: float) -> float | None:
        """From the silence to the child's `deaf` entry in the connection row's history (None: no such entry)."""
        rows = self.hub.query("SELECT history FROM feishu_feishuconnection WHERE bot_id = %s", (self.bot.bot_id,))
        entries = rows[0][0] if rows else []
        deaf = [datetime.fromisoformat(entry["at"]).timestamp() for entry in entries if entry.get("state") == "deaf"]
        later = [at for at in deaf if at >= silent_wall]
        return min(later) - silent_wall if later else None
