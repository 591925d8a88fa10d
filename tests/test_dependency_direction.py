"""ARCHITECTURE §3: dependencies point one way; feishu -> {threadcontext, probe, agents}; probe -> agents."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "agents": ("threadcontext", "probe", "feishu"),
    "threadcontext": ("agents", "probe", "feishu"),
    "probe": ("threadcontext", "feishu"),
}


def _imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("app", sorted(FORBIDDEN))
def test_an_app_never_imports_what_depends_on_it(app):
    # given every module of the app, migrations included (a migration may only name other apps by label)
    offending = []
    for path in sorted((ROOT / app).rglob("*.py")):
        for module in _imported_modules(path):
            if any(module == banned or module.startswith(f"{banned}.") for banned in FORBIDDEN[app]):
                offending.append(f"{path.relative_to(ROOT)} imports {module}")
    # then
    assert offending == []
