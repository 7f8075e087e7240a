"""The layers depend one way: inference -> controlplane -> engine's torch-free modules, and
inside controlplane/ each app imports only the apps below it (CONTROLPLANE_LAYERS).

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
# The control plane's rooms, lowest first: each may import only the ones before it (and itself).
# docs/architecture.md says why this order. The project wiring (settings, the ASGI app, the
# URLconf, Celery and WSGI) may import any of them.
CONTROLPLANE_LAYERS = (
    "common",
    "audit",
    "deployments",
    "fleet",
    "tenants",
    "adapters",
    "shared_prefixes",
    "catalog",
    "billing",
    "end_users",
    "usage",
    "access",
    "metrics",
    "batches",
    "responses",
    "chat_store",
    "dashboard",
    "portal",
    "management_api",
    "launcher",
)
CONTROLPLANE_WIRING = {"settings", "asgi", "urls", "celery", "wsgi", "__init__"}
# What API processes may import from engine/: the Redis contract (the pooling engine's messages
# and cache-aware routing, with the block hashes and adapter identity it hashes prompts by, are
# part of it), torch-free text handling, the torch-free structured-output spec check, and the
# standard-library helper by which bulk workers (the engine, the batch worker) yield the CPU.
ENGINE_FOR_API = (
    "engine.protocol",
    "engine.direct_routing",
    "engine.core.block_hash",
    "engine.adapters",
    "engine.pooling.messages",
    "engine.text",
    "engine.structured.spec",
    "engine.process_priority",
    "engine.redis_outage",  # how both sides wait out a Redis outage: what to retry, what to log
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


def _room(path_or_module: str) -> str | None:
    """The control-plane room of a module path (``controlplane/tenants/x.py``) or name
    (``controlplane.tenants.x``); None outside controlplane/."""
    parts = path_or_module.removesuffix(".py").replace("/", ".").split(".")
    return parts[1] if parts[0] == "controlplane" and len(parts) > 1 else None


def test_every_controlplane_package_has_a_place_in_the_layers():
    rooms = {_room(p.relative_to(REPO).as_posix()) for p in _modules("controlplane")}
    assert rooms - CONTROLPLANE_WIRING == set(CONTROLPLANE_LAYERS)


def test_controlplane_apps_import_only_the_layers_below_them():
    rank = {room: i for i, room in enumerate(CONTROLPLANE_LAYERS)}
    upward = []
    for path in _modules("controlplane"):
        relative = path.relative_to(REPO).as_posix()
        room = _room(relative)
        if room in CONTROLPLANE_WIRING:
            continue
        for name in sorted(_imports(path)):
            target = _room(name)
            if target is None or target == room:
                continue
            if target not in rank or rank[target] > rank[room]:
                upward.append(f"{relative}: {name}")
    assert upward == []


def test_engine_imports_neither_django_nor_the_api_nor_the_control_plane():
    banned = {"django", "rest_framework", "channels", "inference", "controlplane"}
    assert _violations("engine", lambda name: _top(name) in banned) == []


def test_the_serving_engine_never_imports_its_tooling():
    # engine/tooling/ (demo checkpoints, GGUF conversion, random adapters) is for the command
    # line, tests and benchmarks; an engine process must run without it.
    def forbidden(name: str) -> bool:
        return name == "engine.tooling" or name.startswith("engine.tooling.")

    serving = [p for p in _modules("engine") if "tooling" not in p.relative_to(REPO).parts[:2]]
    found = [
        f"{p.relative_to(REPO).as_posix()}: {name}"
        for p in serving
        for name in sorted(_imports(p))
        if forbidden(name)
    ]
    assert found == []


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


def test_test_modules_take_helpers_from_tests_support_not_from_a_conftest():
    """A conftest holds fixtures and hooks; helpers that test files share live in tests/support
    (a conftest may still import another conftest's fixtures, as the fault tests' does)."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if path.name == "conftest.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[-1] == "conftest"
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
