"""Finding environments by name (built-in library, registered, imported namespaces) or by path.

A *name* resolves, in this order, to a built-in environment (``environments/library``), an environment
registered once by the user, or an imported namespace (``agentworld/<id>``). Registration sources, first
match wins: ``$ARENA_ENV_PATH`` (``os.pathsep``-separated environment files/packages or folders of them),
the ``environment_paths`` list in ``$ARENA_HOME/config.toml``, and the ``agent_arena.environments``
entry-point group of installed packages. A *path* (``/abs``, ``./rel``, ``~/x``, ``x.py``, or an existing
folder that is not a known name) is loaded as given; stored tasks never resolve to a path (see
``load_registered``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from environments.paths import arena_home
from environments.sdk.environment import Environment, EnvironmentSpecError

LIBRARY_PACKAGE = "environments.library"
LIBRARY_DIR = Path(__file__).parent / "library"
PATH_VARIABLE = "ARENA_ENV_PATH"
CONFIG_FILE = "config.toml"
CONFIG_KEY = "environment_paths"
ENTRY_POINT_GROUP = "agent_arena.environments"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_\-]*(/[a-z0-9][a-z0-9_\-]*)?$")

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
    # Importers (and the BFCL benchmark environment) register their namespaces on import.
    importlib.import_module("environments.importers")
    importlib.import_module("environments.bfcl")


def check_name(name: str) -> str:
    """``name`` if it is a valid environment name, else ``UnknownEnvironment`` in one line (no '..', no
    absolute parts: a name never reaches outside the registered locations)."""
    if not NAME_PATTERN.match(name):
        raise UnknownEnvironment(
            f"invalid environment name {name!r}: use lower-case letters, digits, '_' or '-' "
            "(optionally one 'namespace/'), or give a path starting with '/' or './'"
        )
    return name


def _is_environment(path: Path) -> bool:
    if path.is_dir():
        return (path / "__init__.py").is_file()
    return path.suffix == ".py" and path.is_file() and not path.name.startswith(("test_", "_"))


def _entries(value: str | list[str]) -> list[Path]:
    parts = value.split(os.pathsep) if isinstance(value, str) else value
    return [Path(p).expanduser() for p in parts if p]


def search_paths() -> list[Path]:
    """Registered locations: ``$ARENA_ENV_PATH``, then ``environment_paths`` in
    ``$ARENA_HOME/config.toml``."""
    paths = _entries(os.environ.get(PATH_VARIABLE, ""))
    config = arena_home() / CONFIG_FILE
    if config.is_file():
        try:
            value = tomllib.loads(config.read_text(encoding="utf-8")).get(CONFIG_KEY, [])
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise EnvironmentSpecError(f"{config} is not valid TOML: {exc}") from None
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise EnvironmentSpecError(f"{config}: {CONFIG_KEY} must be a list of paths")
        paths += _entries(value)
    return paths


def registered_paths() -> dict[str, Path]:
    """Name -> file or package of every environment found on the search paths (first wins). An entry is
    an environment itself (a ``.py`` file or a package folder) or a folder holding environments."""
    found: dict[str, Path] = {}
    for entry in search_paths():
        if _is_environment(entry):
            candidates = [entry]
        elif entry.is_dir():
            candidates = sorted(p for p in entry.iterdir() if _is_environment(p))
        else:
            continue
        for path in candidates:
            name = path.stem if path.suffix == ".py" else path.name
            if NAME_PATTERN.match(name) and name not in found:
                found[name] = path.resolve()
    return found


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def registered_names() -> list[str]:
    """Names registered by search path or entry point (built-in names excluded)."""
    builtin = set(builtin_names())
    names = [*registered_paths(), *(n for n in _entry_points() if NAME_PATTERN.match(n))]
    return sorted(set(names) - builtin)


def all_names() -> list[str]:
    """Built-in names, registered ones, then every imported environment."""
    _load_namespaces()
    names = builtin_names() + registered_names()
    for _prefix, (_loader, lister) in sorted(_namespaces.items()):
        names.extend(lister())
    return names


def _environment_from_module(module: object, origin: str) -> Environment:
    env = module if isinstance(module, Environment) else getattr(module, "env", None)
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
        del sys.modules[module_name]
        raise
    except Exception as exc:
        del sys.modules[module_name]
        raise EnvironmentSpecError(f"{target} failed to import: {type(exc).__name__}: {exc}") from exc
    return _environment_from_module(module, str(target))


def _named(env: Environment, name: str, origin: object) -> Environment:
    if env.name != name:
        raise EnvironmentSpecError(
            f"{origin} is registered as {name!r} but declares Environment(name={env.name!r}); "
            "make the two agree"
        )
    return env


def _load_builtin(name: str) -> Environment:
    try:
        module = importlib.import_module(f"{LIBRARY_PACKAGE}.{name}")
    except EnvironmentSpecError:
        raise
    except Exception as exc:
        raise EnvironmentSpecError(
            f"environment {name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    return _environment_from_module(module, f"{LIBRARY_PACKAGE}.{name}")


def load_registered(name: str) -> Environment:
    """Resolve a *name* only: built-in, registered (search path, config, entry point) or ``namespace/id``.
    Never a path, so a stored task's ``env`` cannot make the arena import an arbitrary file."""
    check_name(name)
    if "/" in name:
        prefix = name.split("/", 1)[0]
        _load_namespaces()
        if prefix in _namespaces:
            return _namespaces[prefix][0](name)
        raise UnknownEnvironment(f"unknown environment namespace {prefix!r} in {name!r}")
    if name in builtin_names():
        return _load_builtin(name)
    if (path := registered_paths().get(name)) is not None:
        return _named(load_path(path), name, path)
    if (entry := _entry_points().get(name)) is not None:
        try:
            loaded = entry.load()
        except Exception as exc:
            raise EnvironmentSpecError(
                f"entry point {name} = {entry.value} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        return _named(_environment_from_module(loaded, entry.value), name, f"entry point {entry.value}")
    known = ", ".join(all_names()) or "(none)"
    raise UnknownEnvironment(
        f"unknown environment {name!r}; known: {known} (register one with ${PATH_VARIABLE}, "
        f"{CONFIG_KEY} in $ARENA_HOME/{CONFIG_FILE}, or an {ENTRY_POINT_GROUP!r} entry point)"
    )


def is_path(ref: str) -> bool:
    """Whether ``ref`` is a filesystem path rather than a name: it starts with '/', '.', '~', ends with
    '.py', or is a folder in the working directory (no '/') that is no built-in or registered name.
    Anything else with a '/' is a ``namespace/id`` name, validated by ``check_name``."""
    if ref.startswith((".", "/", "~")) or ref.endswith(".py"):
        return True
    if "/" in ref or not Path(ref).is_dir():
        return False
    return ref not in builtin_names() and ref not in registered_paths() and ref not in _entry_points()


def canonical_ref(ref: str) -> str:
    """The reference to hand to other processes: a name as is, a path made absolute (the working
    directory of a pool worker is not the caller's)."""
    return str(Path(ref).expanduser().resolve()) if is_path(ref) else ref


def locate(ref: str) -> Path | None:
    """The file or package folder an environment reference loads from (``None`` for built-ins and
    namespaces, whose tests live with the project)."""
    if is_path(ref):
        path = Path(ref).expanduser().resolve()
        return path.parent if path.name == "__init__.py" else path
    path = registered_paths().get(ref)
    if path is None and ref not in builtin_names() and (entry := _entry_points().get(ref)) is not None:
        spec = importlib.util.find_spec(entry.module)
        if spec is not None and spec.origin:
            origin = Path(spec.origin)
            return origin.parent if origin.name == "__init__.py" else origin
    return path


def load_environment(ref: str) -> Environment:
    """Resolve a name (``load_registered``) or, for a reference the user typed, a filesystem path."""
    if is_path(ref):
        return load_path(Path(ref).expanduser())
    return load_registered(ref)
