"""Issue 11 (memory): lark-oapi loads slimly through feishu/outbound/sdk.py, and nothing that reads the SDK the usual
way notices: `import lark_oapi; lark_oapi.Client` still loads the whole SDK, with the very same classes, and our
client sends what lark.Client sends.

Each loading test runs in a fresh interpreter: the test process has loaded lark-oapi long before."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from feishu.outbound.sdk import domain_is_origin, is_slim_package

BASE_DIR = Path(__file__).resolve().parents[2]
# Measured: 968 lark_oapi modules through sdk.py (everything the bridge calls, the event dispatcher included);
# `import lark_oapi` alone loads 10,698. The bound leaves room for an SDK upgrade, not for an eager umbrella.
SLIM_MODULES_MAX = 1_500
FULL_MODULES_MIN = 5_000

SLIM_LOAD = """
import json, sys
import feishu.outbound.sdk
print(json.dumps({
    "modules": len([name for name in sys.modules if name.startswith("lark_oapi")]),
    # what only an umbrella's `__init__` imports (the client with every service, the card and channel layers)
    "eager_only": sorted(name for name in ("lark_oapi.client", "lark_oapi.card", "lark_oapi.channel.channel",
                                           "lark_oapi.scene.registration") if name in sys.modules),
    # packages imported (the dispatcher's event processors live in them) whose `__init__` has not run
    "deferred": [name for name in ("lark_oapi", "lark_oapi.api", "lark_oapi.api.hire", "lark_oapi.api.hire.v1.model",
                                   "lark_oapi.channel") if "__getattr__" in vars(sys.modules[name])],
    "dunder_probe_loads_nothing": not hasattr(sys.modules["lark_oapi"], "__wrapped__")
                                  and "lark_oapi.client" not in sys.modules,
}))
"""

# The slim load, then the SDK read the usual ways, from several threads at once for the first read.
FULL_AFTER_SLIM = """
import json, sys, threading
from feishu.outbound import sdk
import lark_oapi
barrier = threading.Barrier(4)
seen = []
def read():
    barrier.wait()
    seen.append(lark_oapi.Client)
threads = [threading.Thread(target=read) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
from lark_oapi import EventDispatcherHandler, LogLevel
from lark_oapi.api.im.v1 import *  # a star import of a deferred package: every name of its __init__
client = lark_oapi.Client.builder().app_id("cli_a").app_secret("s").build()
print(json.dumps({
    "threads_saw_one_client_class": len(seen) == 4 and len(set(seen)) == 1,
    "identical": [
        EventDispatcherHandler is sdk.EventDispatcherHandler,
        LogLevel is sdk.LogLevel,
        lark_oapi.CustomizedEvent is sdk.CustomizedEvent,
        CreateMessageRequest is sdk.CreateMessageRequest,
        lark_oapi.api.cardkit.v1.CreateCardRequest is sdk.CreateCardRequest,
        type(client.im) is sdk.ImService,
        type(client.cardkit) is sdk.CardkitService,
        lark_oapi.ws.Client is sdk.ws_client_module().Client,
        lark_oapi.core.http.Transport is sdk.Transport,
    ],
    "modules": len([name for name in sys.modules if name.startswith("lark_oapi")]),
}))
"""

# The eager way first (a module that imported lark_oapi before sdk.py did), then sdk.py: the same objects.
SLIM_AFTER_FULL = """
import json
import lark_oapi
from feishu.outbound import sdk
print(json.dumps([sdk.CreateMessageRequest is lark_oapi.api.im.v1.CreateMessageRequest,
                  sdk.EventDispatcherHandler is lark_oapi.EventDispatcherHandler]))
"""

# Our client and lark.Client against one local Feishu: the requests it records must be the same, byte for byte
# (but the tenant token, which the stub numbers per fetch: each client starts from an empty token cache).
SAME_REQUESTS = """
import json
import django
django.setup()
import lark_oapi
from feishu.outbound.client import FeishuClient, RawResult
from feishu.outbound.sdk import (AccessTokenType, BaseRequest, CreateMessageRequest, CreateMessageRequestBody,
                                HttpMethod, LocalCache, TokenManager)
from tests.stubs.feishu_server import FeishuStubServer

def calls(client):
    TokenManager.cache = LocalCache()
    body = (CreateMessageRequestBody.builder().receive_id("oc_1").msg_type("text").content('{"text": "hi"}')
            .uuid("u-1").build())
    sent = client.im.v1.message.create(
        CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build())
    info = BaseRequest.builder().http_method(HttpMethod.GET).uri("/open-apis/bot/v3/info") \\
        .token_types({AccessTokenType.TENANT}).build()
    raw = client.request(info)
    raw = getattr(raw, "raw", raw)  # lark.Client answers a BaseResponse around the raw one
    return sent.success(), RawResult(raw).success()

with FeishuStubServer() as stub:
    ours = calls(FeishuClient(app_id="cli_a", app_secret="s", domain=stub.url, timeout_seconds=10.0))
    first = len(stub.requests)
    theirs = calls(lark_oapi.Client.builder().app_id("cli_a").app_secret("s").domain(stub.url).timeout(10.0)
                   .log_level(lark_oapi.LogLevel.CRITICAL).build())
    tokens = list(stub.valid_tokens)

def seen(request):
    headers = {name: value.replace(tokens[0], "<token>").replace(tokens[-1], "<token>")
               for name, value in request.headers.items()}
    return [request.method, request.path, request.query, headers, request.body]

print(json.dumps({"answers": [ours, theirs], "ours": [seen(r) for r in stub.requests[:first]],
                  "theirs": [seen(r) for r in stub.requests[first:]]}))
"""


def run_fresh(code: str, *, tmp_path: Path) -> object:
    """`code` in a new interpreter on its own SQLite file, with no broker."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_CURRENT_TEST", "REDIS_URL")}
    env["DJANGO_SETTINGS_MODULE"] = "amuxweb.settings.test"
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_slim_load_imports_what_the_bridge_calls_and_no_umbrella(tmp_path):
    # when: a fresh process loads the SDK through sdk.py
    seen = run_fresh(SLIM_LOAD, tmp_path=tmp_path)
    # then: no eager `__init__` ran, not even for a probe of a dunder name
    assert seen["modules"] < SLIM_MODULES_MAX, seen["modules"]
    assert seen["eager_only"] == []
    assert seen["deferred"] == [
        "lark_oapi",
        "lark_oapi.api",
        "lark_oapi.api.hire",
        "lark_oapi.api.hire.v1.model",
        "lark_oapi.channel",
    ]
    assert seen["dunder_probe_loads_nothing"] is True


def test_the_sdk_read_the_usual_way_after_the_slim_load_loads_it_whole_with_the_same_classes(tmp_path):
    # when: after the slim load, code reads lark_oapi.Client (four threads at once), star-imports, builds a client
    seen = run_fresh(FULL_AFTER_SLIM, tmp_path=tmp_path)
    # then
    assert seen["threads_saw_one_client_class"] is True
    assert seen["identical"] == [True] * 9
    assert seen["modules"] > FULL_MODULES_MIN


def test_sdk_py_after_an_eager_import_gives_the_same_classes(tmp_path):
    assert run_fresh(SLIM_AFTER_FULL, tmp_path=tmp_path) == [True, True]


def test_our_client_sends_exactly_what_lark_client_sends(tmp_path):
    # when: the same two calls (a typed im call and a raw request) through each client, at one local Feishu
    seen = run_fresh(SAME_REQUESTS, tmp_path=tmp_path)
    # then: both succeed, with the same token fetch, message create and bot info requests
    assert seen["answers"] == [[True, True], [True, True]]
    assert [request[:2] for request in seen["ours"]] == [
        ["POST", "/open-apis/auth/v3/tenant_access_token/internal"],
        ["POST", "/open-apis/im/v1/messages"],
        ["GET", "/open-apis/bot/v3/info"],
    ]
    assert seen["ours"] == seen["theirs"]


@pytest.mark.parametrize(
    ("domain", "is_origin"),
    [
        ("https://open.feishu.cn", True),
        ("https://open.larksuite.com:443", True),
        ("http://127.0.0.1:8123", True),
        ("http://localhost:8123", True),
        ("http://open.feishu.cn", False),  # plain http leaves the machine
        ("https://open.feishu.cn/open-apis", False),
        ("https://open.feishu.cn?x=1", False),
        ("https://user:pw@open.feishu.cn", False),
        ("ftp://open.feishu.cn", False),
        ("open.feishu.cn", False),
        ("", False),
    ],
)
def test_a_client_domain_must_be_an_https_origin_as_the_sdk_builder_requires(domain, is_origin):
    assert domain_is_origin(domain) is is_origin


@pytest.mark.parametrize(
    ("name", "is_slim"),
    [
        ("lark_oapi", True),
        ("lark_oapi.api", True),
        ("lark_oapi.api.im.v1.model", True),
        ("lark_oapi.channel.normalize", True),
        ("lark_oapi.core", False),  # small, and its names are what everything imports
        ("lark_oapi.event", False),
        ("lark_oapi.ws", False),
        ("lark_oapi.apix", False),
        ("lark_oapi_other", False),
    ],
)
def test_which_packages_defer_their_init(name, is_slim):
    assert is_slim_package(name) is is_slim
