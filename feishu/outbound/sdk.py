"""The one place lark-oapi is loaded from: slimly, so a process holds the SDK parts the bridge calls and no more.

Why: `import lark_oapi` runs its `__init__`, which imports `lark_oapi.api` (whose `__init__` imports every API
package, every model of every version) and `lark_oapi.client` (every API service): 10,698 modules, ~5.5 s of CPU
and ~175 MB in a fresh interpreter (issue 11), in every web and worker process. The bridge calls two services
(im, cardkit), the token manager, the transport, the event dispatcher and one card walk of the channel layer.

How: a meta path finder registers the umbrella packages - `lark_oapi` itself and every package under
`lark_oapi.api` and `lark_oapi.channel` - without running their `__init__`; their submodules import as usual
(`lark_oapi.api.im.v1.resource.message` runs only what it imports itself). Each such package gets a module-level
`__getattr__` (PEP 562) that runs the package's real `__init__` into the module on the first attribute it lacks,
so any code, ours, the SDK's own or a test's, that reads `lark_oapi.X` or does `from lark_oapi import X` still
works: it just loads what that `__init__` loads, then. Dunder probes (`__version__`, `__wrapped__`, ...) do not
trigger it, `__all__` does (a star import needs the package's names). The classes are the same objects either way:
a module runs once, whichever way it was reached.

Measured (a fresh interpreter, lark modules / CPU / RSS): everything below, the dispatcher with the SDK's event
processors included, 893 modules, 0.8 s, 50 MB; `import lark_oapi` 10,698 modules, 5.5 s, 175 MB. The card walk
adds 6 modules; the long connection's websocket client (`ws_client_module`, loaded only by that process) ~35.

Import this module before any `lark_oapi` import: what was imported before it was loaded the eager way.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
import urllib.parse
from collections.abc import Sequence
from typing import Any

# Packages whose `__init__` runs only on demand: `lark_oapi` alone, and these two with every package below them.
SLIM_PACKAGE = "lark_oapi"
SLIM_PACKAGE_TREES = ("lark_oapi.api", "lark_oapi.channel")

# One lock for every deferred `__init__`: a thread reading an attribute while another runs the `__init__` waits
# for it instead of seeing a half-filled package; re-entrant, because an `__init__` reads its own package.
_package_init_lock = threading.RLock()


def is_slim_package(name: str) -> bool:
    return name == SLIM_PACKAGE or any(name == tree or name.startswith(tree + ".") for tree in SLIM_PACKAGE_TREES)


class _DeferredInitLoader(importlib.abc.Loader):
    """Creates the package module as the real loader would, and runs its `__init__` on the first missing name."""

    def __init__(self, real_loader: importlib.abc.Loader) -> None:
        self._real_loader = real_loader

    def __getattr__(self, name: str) -> Any:  # resource readers, get_code, is_package: the real loader's
        return getattr(self._real_loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        module.__getattr__ = _deferred_init_getattr(module, self._real_loader)  # type: ignore[method-assign]


def _deferred_init_getattr(module: types.ModuleType, real_loader: importlib.abc.Loader) -> Any:
    state = {"has_run": False, "is_running": False}

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name != "__all__":
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        with _package_init_lock:
            if not state["has_run"] and not state["is_running"]:
                state["is_running"] = True  # the `__init__` reading its own package sees plain misses
                try:
                    real_loader.exec_module(module)
                finally:
                    state["is_running"] = False
                state["has_run"] = True
                if module.__dict__.get("__getattr__") is __getattr__:  # an `__init__` may define its own
                    del module.__dict__["__getattr__"]
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

    return __getattr__


class _SlimPackageFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not is_slim_package(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return spec  # a plain module: imported as usual
        spec.loader = _DeferredInitLoader(spec.loader)
        return spec


def slim_finder_install() -> None:
    """Put the finder first on sys.meta_path; idempotent."""
    if not any(isinstance(finder, _SlimPackageFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SlimPackageFinder())


slim_finder_install()

# What the bridge uses, imported through the finder (hence after it; E402).
import lark_oapi.channel.normalize.converters.interactive as card_converter  # noqa: E402
from lark_oapi.api.cardkit.service import CardkitService  # noqa: E402
from lark_oapi.api.cardkit.v1 import (  # noqa: E402
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
)
from lark_oapi.api.docx.service import DocxService  # noqa: E402
from lark_oapi.api.docx.v1 import RawContentDocumentRequest  # noqa: E402
from lark_oapi.api.im.service import ImService  # noqa: E402
from lark_oapi.api.im.v1 import (  # noqa: E402
    CreateFileRequest,
    CreateFileRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetChatRequest,
    GetMessageRequest,
    ListMessageRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.api.wiki.service import WikiService  # noqa: E402
from lark_oapi.api.wiki.v2 import GetNodeSpaceRequest  # noqa: E402
from lark_oapi.channel.types import InteractiveContent  # noqa: E402
from lark_oapi.core.cache import LocalCache  # noqa: E402
from lark_oapi.core.enum import AccessTokenType, HttpMethod, LogLevel  # noqa: E402
from lark_oapi.core.exception import ObtainAccessTokenException  # noqa: E402
from lark_oapi.core.http import Transport  # noqa: E402
from lark_oapi.core.json import JSON  # noqa: E402
from lark_oapi.core.log import logger as sdk_logger  # noqa: E402
from lark_oapi.core.model import BaseRequest, Config, RawRequest, RawResponse, RequestOption  # noqa: E402
from lark_oapi.core.token.auth import verify as request_token_add  # noqa: E402
from lark_oapi.core.token.manager import TokenManager  # noqa: E402
from lark_oapi.core.utils.decryptor import AESCipher  # noqa: E402
from lark_oapi.event.callback.model.p2_card_action_trigger import (  # noqa: E402
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)
from lark_oapi.event.custom import CustomizedEvent  # noqa: E402
from lark_oapi.event.dispatcher_handler import EventDispatcherHandler  # noqa: E402


def ws_client_module() -> types.ModuleType:
    """`lark_oapi.ws.client` (the long connection's client and its module-level event loop), loaded on first use:
    websockets and protobuf are for the long-connection process only."""
    return importlib.import_module("lark_oapi.ws.client")


def domain_is_origin(domain: str) -> bool:
    """The SDK builder's rule for a domain (`lark_oapi.client`, not imported here): an https origin, http only on
    loopback, no credentials, path, query or fragment; a request carries the app secret there."""
    parsed = urllib.parse.urlsplit(domain)
    if parsed.scheme == "http":
        is_allowed_scheme = (parsed.hostname or "").lower() in ("127.0.0.1", "localhost", "::1")
    else:
        is_allowed_scheme = parsed.scheme == "https"
    return bool(
        is_allowed_scheme
        and parsed.netloc
        and "@" not in parsed.netloc
        and not (parsed.path or parsed.query or parsed.fragment)
    )


__all__ = [
    "AESCipher",
    "AccessTokenType",
    "BaseRequest",
    "CardkitService",
    "Config",
    "ContentCardElementRequest",
    "CreateFileRequest",
    "CreateFileRequestBody",
    "ContentCardElementRequestBody",
    "CreateCardRequest",
    "CreateCardRequestBody",
    "CreateMessageReactionRequest",
    "CreateMessageReactionRequestBody",
    "CreateMessageRequest",
    "CreateMessageRequestBody",
    "CustomizedEvent",
    "DeleteMessageReactionRequest",
    "DocxService",
    "Emoji",
    "EventDispatcherHandler",
    "GetChatRequest",
    "GetNodeSpaceRequest",
    "GetMessageRequest",
    "ListMessageRequest",
    "HttpMethod",
    "ImService",
    "InteractiveContent",
    "JSON",
    "LocalCache",
    "LogLevel",
    "ObtainAccessTokenException",
    "P2CardActionTrigger",
    "P2CardActionTriggerResponse",
    "PatchMessageRequest",
    "PatchMessageRequestBody",
    "RawContentDocumentRequest",
    "RawRequest",
    "RawResponse",
    "ReplyMessageRequest",
    "ReplyMessageRequestBody",
    "RequestOption",
    "SettingsCardRequest",
    "SettingsCardRequestBody",
    "TokenManager",
    "Transport",
    "WikiService",
    "card_converter",
    "domain_is_origin",
    "is_slim_package",
    "request_token_add",
    "sdk_logger",
    "slim_finder_install",
    "ws_client_module",
]
