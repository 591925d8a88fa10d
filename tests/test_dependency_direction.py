"""ARCHITECTURE §11.0: dependencies point one way, amuxweb -> console -> feishu -> probe -> {agents, threadcontext}
-> core; agents and threadcontext never import each other.

A package may import only packages of a lower layer. Every import counts: at the top, inside a function, in a
migration, and a module named by a constant string to importlib or Django's import_string. Settings are read
through django.conf, never by importing `amuxweb.settings`, so the project package is never a dependency.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first; packages on one layer never import each other.
LAYERS = (
    ("core",),
    ("agents", "threadcontext"),
    ("probe",),
    ("feishu",),
    ("console",),
    ("amuxweb",),
)
LAYER_OF = {package: height for height, layer in enumerate(LAYERS) for package in layer}
# Top-level packages that are not part of the hub: they may import any of it.
OUTSIDE_THE_HOUSE = ("bench", "tests")
# Calls that import the module their first argument names.
DYNAMIC_IMPORTS = ("import_module", "import_string", "__import__")


def forbidden_for(package: str) -> tuple[str, ...]:
    """The packages `package` must not import: those on its own layer and every layer above."""
    return tuple(other for other, height in LAYER_OF.items() if other != package and height >= LAYER_OF[package])


def _called_name(call: ast.Call) -> str:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in the file, wherever it sits."""
    modules: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and _called_name(node) in DYNAMIC_IMPORTS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                modules.append((node.lineno, first.value))
    return modules


def test_the_layers_are_those_of_architecture_11_0():
    # then: the rule as ARCHITECTURE §11.0 words it, package by package
    assert {package: set(forbidden_for(package)) for package in LAYER_OF} == {
        "core": {"amuxweb", "console", "feishu", "probe", "agents", "threadcontext"},
        "agents": {"threadcontext", "probe", "feishu", "console", "amuxweb"},
        "threadcontext": {"agents", "probe", "feishu", "console", "amuxweb"},
        "probe": {"feishu", "console", "amuxweb"},
        "feishu": {"console", "amuxweb"},
        "console": {"amuxweb"},
        "amuxweb": set(),
    }


def test_every_top_level_package_has_a_layer():
    # given every top-level Python package of the repository
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    # then: a new app cannot escape the rule by not being listed
    assert packages - set(OUTSIDE_THE_HOUSE) == set(LAYER_OF)


@pytest.mark.parametrize("package", [package for layer in LAYERS for package in layer])
def test_a_package_never_imports_its_own_layer_or_one_above(package):
    # given every module of the package, migrations included (a migration may only name other apps by label)
    banned = forbidden_for(package)
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if any(module == other or module.startswith(f"{other}.") for other in banned):
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    # then
    assert offending == []
