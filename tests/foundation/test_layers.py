"""The layers depend one way: inference -> controlplane -> engine's torch-free modules.

Read from the source (every import statement, including ones inside functions), so a lazy
import cannot slip a dependency past the rule. DESIGN.md section 3 and docs/architecture.md
state the rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The project wiring names both the API and the control plane: the ASGI app and the URLconf.
WIRING = {"controlplane/asgi.py", "controlplane/urls.py"}
# What API processes may import from engine/: the Redis contract (the pooling engine's messages
# are part of it), torch-free text handling, and the torch-free structured-output spec check.
ENGINE_FOR_API = (
    "engine.protocol",
    "engine.pooling.messages",
    "engine.text",
    "engine.structured.spec",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from engine import protocol" imports the module engine.protocol; "from
            # engine.protocol import Keys" the module engine.protocol.
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if _is_module(submodule) else node.module)
    return names


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (REPO / package).rglob("*.py") if "migrations" not in p.parts)


def _violations(package: str, forbidden) -> list[str]:
    found = []
    for path in _modules(package):
        relative = path.relative_to(REPO).as_posix()
        if relative in WIRING:
            continue
        found += [f"{relative}: {name}" for name in sorted(_imports(path)) if forbidden(name)]
    return found


def _top(name: str) -> str:
    return name.split(".")[0]


def test_controlplane_never_imports_inference():
    assert _violations("controlplane", lambda name: _top(name) == "inference") == []


def test_engine_imports_neither_django_nor_the_api_nor_the_control_plane():
    banned = {"django", "rest_framework", "channels", "inference", "controlplane"}
    assert _violations("engine", lambda name: _top(name) in banned) == []


def test_inference_takes_from_engine_only_the_contract_and_text_modules():
    def forbidden(name: str) -> bool:
        if _top(name) != "engine" or name == "engine":
            return False
        return not any(name == m or name.startswith(m + ".") for m in ENGINE_FOR_API)

    assert _violations("inference", forbidden) == []


@pytest.mark.parametrize("package", ["inference", "engine"])
def test_no_module_is_over_350_lines(package):
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in _modules(package)
        if (n := len(p.read_text().splitlines())) > 350
    ]
    assert long == []
