"""Environment references: names vs paths, registration (env var, config key, entry point), name checks,
the rule for stored tasks, and the layering of task_synth/environments."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from environments import registry
from environments.registry import (
    UnknownEnvironment,
    canonical_ref,
    is_path,
    load_environment,
    load_registered,
    locate,
    registered_names,
)
from environments.scaffold import scaffold_environment
from environments.sdk.environment import EnvironmentSpecError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Nothing registered: no ARENA_ENV_PATH, an empty ARENA_HOME."""
    monkeypatch.delenv("ARENA_ENV_PATH", raising=False)
    monkeypatch.setenv("ARENA_HOME", str(tmp_path / "home"))
    return tmp_path


def test_paths_and_names_are_told_apart(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_path("/abs/x") and is_path("./x") and is_path("../x") and is_path("~/x") and is_path("x.py")
    assert not is_path("airline") and not is_path("agentworld/0001")
    scaffold_environment("airline", clean)  # a folder shadowing a built-in name stays the built-in
    scaffold_environment("mine", clean)
    monkeypatch.chdir(clean)
    assert not is_path("airline") and is_path("mine")
    assert canonical_ref("mine") == str((clean / "mine").resolve())
    assert (
        canonical_ref("./mine") == str((clean / "mine").resolve()) and canonical_ref("airline") == "airline"
    )
    assert load_environment("mine").name == "mine"


@pytest.mark.parametrize("name", ["agentworld/../../x", "../etc", "a/b/c", "Upper", "x;rm", "/abs"])
def test_names_with_traversal_are_refused_in_one_line(clean: Path, name: str) -> None:
    with pytest.raises(UnknownEnvironment) as caught:
        load_registered(name)
    assert "\n" not in str(caught.value) and repr(name) in str(caught.value)


def test_a_stored_reference_never_loads_a_path(clean: Path) -> None:
    """`load_registered` (what stored tasks go through) never imports a file, however it is spelled."""
    marker = clean / "ran"
    (clean / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    for ref in (str(clean / "evil.py"), "evil", "./evil.py"):
        with pytest.raises(UnknownEnvironment):
            load_registered(ref)
    assert not marker.exists()


def test_registration_by_env_var_folder_or_file(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    envs = clean / "envs"
    scaffold_environment("vetclinic", envs)
    single = clean / "solo.py"
    single.write_text((envs / "vetclinic" / "__init__.py").read_text().replace('"vetclinic"', '"solo"'))
    with pytest.raises(UnknownEnvironment, match="ARENA_ENV_PATH"):
        load_registered("vetclinic")
    monkeypatch.setenv("ARENA_ENV_PATH", f"{envs}{registry.os.pathsep}{single}")
    assert {"vetclinic", "solo"} <= set(registered_names())
    assert load_registered("vetclinic").name == "vetclinic" and load_registered("solo").name == "solo"
    assert locate("solo") == single.resolve() and locate("vetclinic") == (envs / "vetclinic").resolve()


def test_registration_by_config_key_and_name_mismatch(clean: Path) -> None:
    envs = clean / "envs"
    scaffold_environment("clinic", envs)
    init = envs / "clinic" / "__init__.py"
    (clean / "home").mkdir()
    (clean / "home" / "config.toml").write_text(f'environment_paths = ["{envs}"]\n')
    assert load_registered("clinic").name == "clinic"
    init.write_text(init.read_text().replace('"clinic"', '"other"'))
    with pytest.raises(EnvironmentSpecError, match="declares"):
        load_registered("clinic")
    (clean / "home" / "config.toml").write_text("environment_paths = 3\n")
    with pytest.raises(EnvironmentSpecError, match="list of paths"):
        registered_names()


def test_registration_by_entry_point(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pip package of environments declares them in the `agent_arena.environments` group."""
    site = clean / "site"
    scaffold_environment("kennel", site / "my_envs")
    (site / "my_envs" / "__init__.py").write_text("")
    dist = site / "my_envs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agent_arena.environments]\nkennel = my_envs.kennel\n")
    monkeypatch.syspath_prepend(str(site))
    assert "kennel" in registered_names()
    assert load_registered("kennel").name == "kennel"
    assert locate("kennel") == (site / "my_envs" / "kennel").resolve()
    sys.modules.pop("my_envs.kennel", None)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", ["task_synth", "environments"])
def test_lower_layers_never_import_arena(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imports(path)
        if name == "arena" or name.startswith("arena.")
    ]
    assert not offenders, offenders
