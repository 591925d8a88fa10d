"""The docs keep step with the code: Feishu events and scopes, settings, and links that lead somewhere.

Each check reads the code the way a reviewer would, never a list kept by hand beside it: the event types the
bridge registers with lark-oapi (feishu/inbound/), the Feishu API families its outbound modules call
(feishu/outbound/), the variables the settings read with `env(...)` (amuxweb/settings/). A newcomer sets up a
Feishu app from docs/feishu-setup.md alone, so an event or scope missing there is a bot that never hears a
recall or never sends a card. When the code calls a Feishu API or registers an event the tables below do not
know, the test says so: add the scope it needs to the table and to docs/feishu-setup.md.
"""

import ast
import re
from pathlib import Path

from feishu.manifest import API_FAMILY_SCOPES, EVENT_SCOPES, SCOPE_PURPOSES, scopes_needed

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FEISHU_SETUP = DOCS / "feishu-setup.md"
CONFIGURATION = DOCS / "configuration.md"
ENV_EXAMPLE = ROOT / ".env.example"
README = ROOT / "README.md"
README_MAX_LINES = 250

# The scopes and events the hub needs: one list in code (feishu/manifest.py), also shown on each bot's setup page.
REGISTER_PREFIX = "register_p"
# lark-oapi's generic registrations take the event type as their first argument; the typed ones
# (register_p2_im_message_receive_v1) carry it in their own name.
CUSTOMIZED_SUFFIX = "customized_event"
# A typed SDK call: `client.im.v1.message_reaction.create(...)`.
SDK_CALL = re.compile(r"\b([a-z]+)\.(v\d+)\.([a-z_]+)\.[a-z_]+\(")
# A raw Open API path: `/open-apis/im/v1/messages/{message_id}/resources/{file_key}`.
OPEN_API_PATH = re.compile(r"/open-apis/([a-z_]+)/(v\d+)((?:/[A-Za-z_{}]+)*)")
ENV_READ = re.compile(r"""\benv(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]*)["']""")
ENV_EXAMPLE_LINE = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=", re.MULTILINE)
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCED_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _string_sequence(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Tuple | ast.List) and all(
        isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts
    ):
        return [item.value for item in node.elts]
    return None


def _module_string_sequences(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a tuple or list of string literals (HANDLED_EVENT_TYPES = ("im...", ...))."""
    sequences = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        values = _string_sequence(node.value)
        for target in targets:
            if isinstance(target, ast.Name) and values is not None:
                sequences[target.id] = values
    return sequences


def _registration_events(call: ast.Call, bound: dict[str, list[str]], where: str) -> list[str]:
    method = call.func.attr
    if not method.endswith(CUSTOMIZED_SUFFIX):
        # Typed: the SDK spells the event type with underscores (im_message_receive_v1).
        return [re.sub(r"^register_p\d_", "", method)]
    argument = call.args[0] if call.args else None
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return [argument.value]
    if isinstance(argument, ast.Name) and argument.id in bound:
        return bound[argument.id]
    raise AssertionError(
        f"{where}: cannot tell which event type {method} registers; give it a literal or a loop over a constant"
    )


def _registered_event_types(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _module_string_sequences(tree)
    events: list[str] = []

    def visit(node: ast.AST, bound: dict[str, list[str]]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            values = constants.get(node.iter.id) if isinstance(node.iter, ast.Name) else _string_sequence(node.iter)
            if values is not None:
                bound = {**bound, node.target.id: values}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith(REGISTER_PREFIX)
        ):
            events.extend(_registration_events(node, bound, f"{path.relative_to(ROOT)}:{node.lineno}"))
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, {})
    return events


def _bridge_event_types() -> set[str]:
    return {
        event for path in sorted((ROOT / "feishu" / "inbound").glob("*.py")) for event in _registered_event_types(path)
    }


def _documented_event_names(text: str) -> set[str]:
    names = set(re.findall(r"`([a-z0-9_.]+_v\d+|card\.action\.trigger)`", text))
    return names | {name.replace(".", "_") for name in names}


def _open_api_family(service: str, version: str, path: str) -> str:
    # /im/v1/messages/{id}/resources/{key} -> im.v1.message_resource: the resources named, placeholders dropped,
    # plurals made singular, as lark-oapi names its resource classes.
    resources = [segment.removesuffix("s") for segment in path.split("/") if segment and not segment.startswith("{")]
    return f"{service}.{version}.{'_'.join(resources)}"


def _outbound_api_families() -> set[str]:
    families = set()
    for path in sorted((ROOT / "feishu" / "outbound").glob("*.py")):
        source = path.read_text()
        families.update(".".join(match) for match in SDK_CALL.findall(source))
        families.update(_open_api_family(*match) for match in OPEN_API_PATH.findall(source))
    return families


def _settings_environment_variables() -> set[str]:
    return {
        name
        for path in sorted((ROOT / "amuxweb" / "settings").glob("*.py"))
        for name in ENV_READ.findall(path.read_text())
    }


def _relative_link_targets(path: Path) -> list[str]:
    text = FENCED_BLOCK.sub("", path.read_text())
    targets = [target.split("#", 1)[0] for target in MARKDOWN_LINK.findall(text)]
    return [target for target in targets if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def test_every_event_the_bridge_registers_is_in_the_feishu_setup_page():
    # given the event types both intakes register with lark-oapi
    registered = _bridge_event_types()
    documented = _documented_event_names(FEISHU_SETUP.read_text())

    # then the parser found the registrations at all, and the page names each one
    assert "im.message.receive_v1" in registered
    assert sorted(registered - documented) == []


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table_first_column(section: str) -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))


def test_the_subscribed_events_in_code_docs_and_registered_handlers_are_one_list():
    # given the code's list (feishu/manifest.py), the handlers both intakes register, and the setup page's Events
    # section (its events table and its callbacks table)
    registered = {event.replace(".", "_") for event in _bridge_event_types()}
    documented = {
        event.replace(".", "_") for event in _table_first_column(_section(FEISHU_SETUP.read_text(), "Events"))
    }
    in_code = {event.replace(".", "_") for event in EVENT_SCOPES}

    # then all three are equal: nothing handled but unsubscribed, nothing subscribed but unhandled
    assert registered == in_code
    assert documented == in_code


def test_every_registered_event_has_its_scopes_in_the_feishu_setup_page():
    # given the event types the bridge registers (a typed registration spells its type with underscores)
    registered = {event.replace(".", "_") for event in _bridge_event_types()}
    scopes_by_event = {event.replace(".", "_"): scopes for event, scopes in EVENT_SCOPES.items()}
    page = FEISHU_SETUP.read_text()

    # then each is a known event (a new one needs its scopes worked out) and every scope it needs is on the page
    assert sorted(registered - set(scopes_by_event)) == []
    missing = sorted({scope for event in registered for scope in scopes_by_event[event] if f"`{scope}`" not in page})
    assert missing == []


def test_every_feishu_api_the_outbound_code_calls_has_its_scope_in_the_feishu_setup_page():
    # given the Feishu API families feishu/outbound/ calls (typed SDK calls and raw Open API paths)
    called = _outbound_api_families()
    page = FEISHU_SETUP.read_text()

    # then the scanner saw the calls every reply makes, each family is known, and each scope is on the page
    assert {"im.v1.message", "im.v1.message_reaction", "cardkit.v1.card", "im.v1.message_resource"} <= called
    assert sorted(called - set(API_FAMILY_SCOPES)) == []
    missing = sorted({scope for family in called for scope in API_FAMILY_SCOPES[family] if f"`{scope}`" not in page})
    assert missing == []


def test_every_setting_is_in_env_example_and_the_configuration_page_and_nothing_else_is():
    # given every variable the settings read, and every variable .env.example names
    read = _settings_environment_variables()
    example = set(ENV_EXAMPLE_LINE.findall(ENV_EXAMPLE.read_text()))
    configuration = CONFIGURATION.read_text()

    # then both list each one, and .env.example names nothing the settings ignore
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"} <= read
    assert sorted(read - example) == []
    assert sorted(name for name in read if f"| `{name}` |" not in configuration) == []
    assert sorted(example - read) == []


def test_the_readme_is_short():
    lines = README.read_text().splitlines()

    assert len(lines) < README_MAX_LINES


def test_every_relative_link_in_the_readme_and_the_docs_points_to_a_file_that_exists():
    # given every markdown page a reader is sent to
    pages = [README, ROOT / "bench" / "README.md", *sorted(DOCS.glob("*.md"))]

    # then each relative link resolves from the page's own folder
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in pages
        for target in _relative_link_targets(page)
        if not (page.parent / target).exists()
    ]
    assert len(pages) > 2
    assert broken == []


def test_the_setup_page_and_the_manifest_list_the_same_scopes():
    """Every scope the manifest needs has a purpose shown on the bot's setup page, and the docs list each."""
    text = FEISHU_SETUP.read_text()
    assert sorted(scopes_needed()) == sorted(SCOPE_PURPOSES)
    assert [scope for scope in scopes_needed() if f"`{scope}`" not in text] == []
