"""The Feishu bridge: webhook and long-connection intake, routing, turns and delivery through lark-oapi.

lark-oapi is the heaviest import of the project (10,728 modules, ~5 s of CPU and ~150 MB; loaded slimly by
`feishu.outbound.sdk` still ~970 modules, ~1 s and ~30 MB; issue 11) and most processes never call Feishu:
`manage.py check`, `migrate`, `feishu_context_explain`, beat. The modules that import it at their top, the
outbound calls (`client`, `sends`, `cardkit`, `reads`) and `webhook` (the event handler), are therefore
registered here as lazy modules (importlib's LazyLoader): `from feishu.outbound import client` binds the module
object at once and runs its body, lark-oapi with it, on the first attribute read. Nothing else changes for a
caller, a test's monkeypatch included.

A process that talks to Feishu loads them before its first request with `lark_modules_load()`: the WSGI app
(`amuxweb/wsgi.py`; gunicorn `--preload` loads it once in the master so workers share the pages by fork) and
the Celery worker (`worker_init`, before the pool forks). The long connection loads it itself (its module).
"""

import importlib.util
import sys
import types

# The bridge's modules that import lark-oapi at their top (longconn too, but only `feishu_connect` loads it).
LARK_MODULES = (
    "feishu.outbound.client",
    "feishu.outbound.sends",
    "feishu.outbound.cardkit",
    "feishu.outbound.reads",
    "feishu.outbound.docs",
    "feishu.inbound.webhook",
)


def _lazy_module_register(name: str) -> None:
    """Put a not-yet-executed module for `name` in sys.modules and on its package, as an import would."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # with LazyLoader: only arms the first-attribute-read hook
    package, _, child = name.rpartition(".")
    setattr(sys.modules[package], child, module)


def lazy_module_is_loaded(name: str) -> bool:
    """Whether a lazy module's body has run (reading any attribute would run it: `type()` reads none)."""
    module = sys.modules.get(name)
    return module is not None and type(module) is types.ModuleType


def lark_modules_load() -> None:
    """Run the lazy modules' bodies now (lark-oapi with them), so no request pays for the import."""
    for name in LARK_MODULES:
        module = importlib.import_module(name)
        module.__name__  # noqa: B018 - the first attribute read executes a lazy module


for _name in LARK_MODULES:
    _lazy_module_register(_name)
