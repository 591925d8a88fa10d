"""The house rules of issue 21 (items 4 and 5), on every module of the hub: tests/, bench/, migrations and the
virtualenv are outside the house.

- No module over MODULE_MAX_LINES lines, unless its first comment line, above its first statement after the
  docstring, starts with `# Long because` and says why.
- No function over FUNCTION_MAX_LINES lines (its def line through its last line), unless the first line after
  its header (or after its docstring) is a comment starting with `# Long because` that says why.
- No function-local import of the project's own packages, except the three ARCHITECTURE §11.0 accepts:
  (a) inside a Celery task (decorated with shared_task), importing the service it calls;
  (b) a service importing a task from a `tasks` module (the task it enqueues);
  (c) an import whose line, or the line above it, carries a comment (a lazy SDK load, an AppConfig.ready()
      import), which must say why it is local; a comment above a run of imports covers the run.

Each failure lists every violation as path:line. The checks are plain functions over one source text, tested on
small examples first so that a wrong check cannot pass the tree by accident.
"""

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 80
OWN_PACKAGES = ("amuxweb", "core", "console", "feishu", "probe", "agents", "threadcontext")
# Directories never read, wherever they are; names starting with a dot (.venv, .git) are skipped too.
OUTSIDE_THE_HOUSE = {"tests", "bench", "migrations", "__pycache__", "node_modules", "var", "staticfiles"}
LONG_BECAUSE = re.compile(r"#\s*Long because\s+\S")
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Source:
    path: str
    lines: list[str]
    tree: ast.Module
    comment_lines: frozenset[int]
    # The line of each def keyword -> the line of the colon that ends its header.
    header_ends: dict[int, int]


def source_parse(path: str, text: str) -> Source:
    comment_lines, header_ends = set(), {}
    def_line, depth = None, 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comment_lines.add(token.start[0])
        elif token.type == tokenize.NAME and token.string == "def" and def_line is None:
            def_line, depth = token.start[0], 0
        elif token.type == tokenize.OP and def_line is not None:
            depth += (token.string in "([{") - (token.string in ")]}")
            if token.string == ":" and depth == 0:
                header_ends[def_line], def_line = token.start[0], None
    return Source(
        path=path,
        lines=text.splitlines(),
        tree=ast.parse(text, filename=path),
        comment_lines=frozenset(comment_lines),
        header_ends=header_ends,
    )


def _docstring_end(body: list[ast.stmt]) -> int | None:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return None


def _first_line_after(source: Source, line: int) -> str:
    """The first non-blank line after `line` (1-based), stripped."""
    return next((text.strip() for text in source.lines[line:] if text.strip()), "")


def module_too_long(source: Source) -> list[str]:
    if len(source.lines) <= MODULE_MAX_LINES:
        return []
    body = source.tree.body
    first_statement = body[1 if _docstring_end(body) is not None else 0 :]
    top_ends = first_statement[0].lineno if first_statement else len(source.lines) + 1
    first_comment = min((line for line in source.comment_lines if line < top_ends), default=None)
    if first_comment is not None and LONG_BECAUSE.match(source.lines[first_comment - 1].strip()):
        return []
    return [f"{source.path}:1 module has {len(source.lines)} lines (over {MODULE_MAX_LINES})"]


def functions_too_long(source: Source) -> list[str]:
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, FunctionNode):
            continue
        length = node.end_lineno - node.lineno + 1
        if length <= FUNCTION_MAX_LINES:
            continue
        after = _docstring_end(node.body) or source.header_ends.get(node.lineno, node.lineno)
        if not LONG_BECAUSE.match(_first_line_after(source, after)):
            found.append(f"{source.path}:{node.lineno} {node.name}() has {length} lines (over {FUNCTION_MAX_LINES})")
    return found


def _own_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of ours the import names (a relative import is always ours), as written."""
    if isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        is_own = node.level > 0 or module.split(".")[0] in OWN_PACKAGES
        return [module] if is_own else []
    return [alias.name for alias in node.names if alias.name.split(".")[0] in OWN_PACKAGES]


def _imports_tasks_only(node: ast.Import | ast.ImportFrom) -> bool:
    """`from x.tasks import t`, `from x import tasks`, `import x.tasks`."""
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[-1] == "tasks" or all(alias.name == "tasks" for alias in node.names)
    return all(alias.name.split(".")[-1] == "tasks" for alias in node.names)


def _is_celery_task(function: FunctionNode) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "shared_task":
            return True
    return False


def _local_imports(
    node: ast.AST, function: FunctionNode | None
) -> Iterator[tuple[ast.Import | ast.ImportFrom, FunctionNode]]:
    """Every import inside a function, with the function nearest to it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom) and function is not None:
            yield child, function
        yield from _local_imports(child, child if isinstance(child, FunctionNode) else function)


def _commented(source: Source, node: ast.Import | ast.ImportFrom, import_lines: set[int]) -> bool:
    """A comment on the import's lines, on the line above, or on the line above the run of imports it ends."""
    if any(line in source.comment_lines for line in range(node.lineno - 1, node.end_lineno + 1)):
        return True
    line = node.lineno - 1
    while line in import_lines:
        line -= 1
    return line in source.comment_lines


def local_imports_not_allowed(source: Source) -> list[str]:
    found = []
    import_lines = {
        line
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for line in range(node.lineno, node.end_lineno + 1)
    }
    for node, function in _local_imports(source.tree, None):
        modules = _own_modules(node)
        if not modules:
            continue
        in_a_task = _is_celery_task(function)
        of_a_task = _imports_tasks_only(node)
        if not (in_a_task or of_a_task or _commented(source, node, import_lines)):
            found.append(f"{source.path}:{node.lineno} {function.name}() imports {', '.join(modules)} locally")
    return found


@cache
def house_sources() -> tuple[Source, ...]:
    sources = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = sorted(
            name for name in subdirectories if not name.startswith(".") and name not in OUTSIDE_THE_HOUSE
        )
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(directory) / name
                sources.append(source_parse(str(path.relative_to(ROOT)), path.read_text()))
    return tuple(sources)


# --- the checks on small examples -----------------------------------------------------------------------------


def _function(*, lines: int, first: str = "", docstring: bool = False) -> str:
    """A module with one function `lines` long (def line included)."""
    body = ['    """Why."""'] if docstring else []
    body += [first] if first else []
    body += ["    x = 1"] * (lines - 1 - len(body))
    return "\n".join(["def work():", *body]) + "\n"


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        (_function(lines=FUNCTION_MAX_LINES), False),
        (_function(lines=FUNCTION_MAX_LINES + 1), True),
        (
            _function(lines=FUNCTION_MAX_LINES + 1, first="    # Long because one table of cases reads best whole."),
            False,
        ),
        (_function(lines=FUNCTION_MAX_LINES + 1, first="    # Long because one table.", docstring=True), False),
        (_function(lines=FUNCTION_MAX_LINES + 1, first="    # Long because"), True),  # no reason given
        (_function(lines=FUNCTION_MAX_LINES + 1, first="    # long, sorry"), True),
        (
            "def work(\n    a: int,  # the header spans lines\n) -> None:\n    # Long because the header's comment is not it.\n"
            + "    a = 1\n" * FUNCTION_MAX_LINES,
            False,
        ),
        (
            "def work(\n    a: int,  # Long because a comment in the header does not count\n) -> None:\n"
            + "    a = 1\n" * FUNCTION_MAX_LINES,
            True,
        ),
    ],
)
def test_the_function_check_flags_a_long_function_unless_it_says_why(text, flagged):
    assert bool(functions_too_long(source_parse("example.py", text))) is flagged


@pytest.mark.parametrize(
    ("top", "flagged"),
    [
        ("", True),
        ("# Long because it is one table of every case.\n", False),
        ("# a plain comment\n# Long because it comes second.\n", True),
    ],
)
def test_the_module_check_flags_a_long_module_unless_its_first_comment_says_why(top, flagged):
    text = '"""A module."""\n\n' + top + "x = 1\n" * MODULE_MAX_LINES
    assert bool(module_too_long(source_parse("example.py", text))) is flagged


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("def f():\n    from feishu.models import InboundEvent\n", True),
        ("def f():\n    import agents.models\n", True),
        ("def f():\n    from . import models\n", True),
        ("def f():\n    import json\n    from django.conf import settings\n", False),
        ("from feishu.models import InboundEvent\n", False),
        ("@shared_task\ndef t():\n    from feishu.inbound.routing import route\n", False),
        ("@shared_task(name='x')\ndef t():\n    from feishu.inbound.routing import route\n", False),
        ("@shared_task\ndef t():\n    def inner():\n        from feishu.inbound.routing import route\n", True),
        ("def service():\n    from agents.tasks import turn_run_task\n", False),
        ("def service():\n    from feishu import tasks\n", False),
        ("def service():\n    from agents.tasks import turn_run_task\n    from agents.models import Turn\n", True),
        ("def f():\n    # the SDK is heavy: loaded on first use\n    from feishu.outbound import sdk\n", False),
        ("def f():\n    from feishu.outbound import sdk  # heavy: loaded on first use\n", False),
        ("class A:\n    def ready(self):\n        from feishu import checks  # registers the checks\n", False),
        (
            "def f():\n    # the SDK, on first use\n    from feishu import a\n    from feishu import (\n        b,\n    )\n",
            False,
        ),
        ("def f():\n    # the SDK, on first use\n    from feishu import a\n\n    from feishu import b\n", True),
    ],
)
def test_the_import_check_allows_only_the_accepted_local_imports(text, flagged):
    assert bool(local_imports_not_allowed(source_parse("example.py", text))) is flagged


# --- the checks on the house ----------------------------------------------------------------------------------


def test_the_house_is_read():
    # Guards the walk: the house holds the apps and none of what lies outside it.
    paths = {source.path for source in house_sources()}
    assert {"manage.py", "amuxweb/settings/base.py", "feishu/tasks.py", "core/text.py"} <= paths
    assert not [path for path in paths if path.split(os.sep)[0] in {"tests", "bench", ".venv"} or "migrations" in path]


def test_no_module_over_400_lines_unless_it_says_why():
    violations = [violation for source in house_sources() for violation in module_too_long(source)]
    assert not violations, "\n".join(violations)


def test_no_function_over_80_lines_unless_it_says_why():
    violations = [violation for source in house_sources() for violation in functions_too_long(source)]
    assert not violations, "\n".join(violations)


def test_no_function_local_import_of_our_own_modules_but_the_accepted_ones():
    violations = [violation for source in house_sources() for violation in local_imports_not_allowed(source)]
    assert not violations, "\n".join(violations)
