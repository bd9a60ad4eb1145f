"""Finding environments by name (built-in library, imported namespaces) or by path."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path

from environments.sdk.environment import Environment, EnvironmentSpecError

LIBRARY_PACKAGE = "environments.library"
LIBRARY_DIR = Path(__file__).parent / "library"

NamespaceLoader = Callable[[str], Environment]
NamespaceLister = Callable[[], list[str]]
_namespaces: dict[str, tuple[NamespaceLoader, NamespaceLister]] = {}


class UnknownEnvironment(LookupError):
    """No environment has the requested name."""


def register_namespace(prefix: str, loader: NamespaceLoader, lister: NamespaceLister) -> None:
    """Make ``prefix/<id>`` names resolvable (used by importers, e.g. ``agentworld``)."""
    _namespaces[prefix] = (loader, lister)


def builtin_names() -> list[str]:
    """Names of the environments in ``environments/library``."""
    return sorted(
        m.name for m in pkgutil.iter_modules([str(LIBRARY_DIR)]) if m.ispkg and not m.name.startswith("_")
    )


def _load_namespaces() -> None:
    # Importers register their namespaces on import.
    importlib.import_module("environments.importers")


def all_names() -> list[str]:
    """Built-in names followed by every imported environment."""
    _load_namespaces()
    names = builtin_names()
    for _prefix, (_loader, lister) in sorted(_namespaces.items()):
        names.extend(lister())
    return names


def _environment_from_module(module: object, origin: str) -> Environment:
    env = getattr(module, "env", None)
    if not isinstance(env, Environment):
        raise EnvironmentSpecError(f"{origin} defines no module-level `env = Environment(...)`")
    return env


def load_path(path: Path) -> Environment:
    """Load the environment defined by a Python file or a package directory."""
    path = path.resolve()
    target = path / "__init__.py" if path.is_dir() else path
    if not target.exists():
        raise UnknownEnvironment(f"no environment at {path} (expected a .py file or a package directory)")
    module_name = f"arena_user_env_{abs(hash(str(target)))}"
    spec = importlib.util.spec_from_file_location(
        module_name, target, submodule_search_locations=[str(path)] if path.is_dir() else None
    )
    if spec is None or spec.loader is None:
        raise EnvironmentSpecError(f"cannot import {target}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except EnvironmentSpecError:
        raise
    except Exception as exc:
        raise EnvironmentSpecError(f"{target} failed to import: {type(exc).__name__}: {exc}") from exc
    return _environment_from_module(module, str(target))


def load_environment(ref: str) -> Environment:
    """Resolve a built-in name, ``namespace/id``, or a filesystem path to an ``Environment``."""
    candidate = Path(ref)
    if ref.endswith(".py") or candidate.is_dir() or ref.startswith((".", "/", "~")):
        return load_path(candidate.expanduser())
    if "/" in ref:
        prefix = ref.split("/", 1)[0]
        _load_namespaces()
        if prefix in _namespaces:
            return _namespaces[prefix][0](ref)
        raise UnknownEnvironment(f"unknown environment namespace {prefix!r} in {ref!r}")
    if ref not in builtin_names():
        known = ", ".join(all_names()) or "(none)"
        raise UnknownEnvironment(f"unknown environment {ref!r}; known: {known}")
    try:
        module = importlib.import_module(f"{LIBRARY_PACKAGE}.{ref}")
    except EnvironmentSpecError:
        raise
    except Exception as exc:
        raise EnvironmentSpecError(
            f"environment {ref!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    return _environment_from_module(module, f"{LIBRARY_PACKAGE}.{ref}")
