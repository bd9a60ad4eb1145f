"""The `arena` command line, run as a user would (a real subprocess)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from arena.cli.main import COMMANDS
from environments.registry import builtin_names


def arena(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena.cli.main", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_help_lists_every_command_and_a_command_imports_only_its_own_module() -> None:
    listed = arena("--help")
    assert listed.returncode == 0

    assert all(command in listed.stdout for command in COMMANDS)
    probe = (
        "import sys; from arena.cli.main import build_parser; build_parser(['tasks', 'list']); "
        "print(sorted(m for m in sys.modules if m.startswith('arena.cli.') and m != 'arena.cli.main'))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert "arena.cli.tasks" in loaded.stdout and "arena.cli.demo" not in loaded.stdout, loaded.stdout


def test_env_list_json_names_every_builtin() -> None:
    result = arena("env", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {r["name"] for r in rows} >= set(builtin_names())
    assert len(builtin_names()) >= 6
    for row in rows:
        assert row["category"] and row["tools"] >= 8


def test_env_show_lists_tools_and_row_counts() -> None:
    result = arena("env", "show", "library", "--json")
    info = json.loads(result.stdout)
    assert sum(info["tables"].values()) >= 200 and len(info["tables"]) >= 4
    assert {t["name"] for t in info["tools"]} >= {"checkout_copy", "search_books"}


def test_unknown_environment_is_one_clear_line() -> None:
    result = arena("env", "show", "atlantis")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unknown environment 'atlantis'" in result.stderr and "airline" in result.stderr


def test_new_then_check_passes(tmp_path: Path) -> None:
    assert arena("env", "new", "helpdesk", "--dir", str(tmp_path)).returncode == 0
    result = arena("env", "check", str(tmp_path / "helpdesk"))
    assert result.returncode == 0, result.stdout
    assert "seed is deterministic" in result.stdout and "3 passed" in result.stdout
    again = arena("env", "new", "helpdesk", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_check_reports_a_broken_spec(tmp_path: Path) -> None:
    assert arena("env", "new", "broken", "--dir", str(tmp_path)).returncode == 0
    init = tmp_path / "broken" / "__init__.py"
    source = init.read_text().replace("rng.choice(SUBJECTS)", "SUBJECTS[next(BUILDS) // 40 % 5]")
    source = source.replace(
        "import random\n", "import itertools\nimport random\n\nBUILDS = itertools.count()\n"
    )
    init.write_text(source)  # the subjects now differ between two builds of the seed
    result = arena("env", "check", str(tmp_path / "broken"), "--no-tests")
    assert result.returncode == 1
    assert "FAIL seed is deterministic" in result.stdout


def test_check_reports_an_import_error(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "__init__.py").write_text("import does_not_exist\n")
    result = arena("env", "check", str(tmp_path / "bad"))
    assert result.returncode == 1 and "FAIL loads" in result.stdout and "does_not_exist" in result.stdout


def test_serve_on_a_port_in_use_fails_clearly() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = arena("env", "serve", "airline", "--port", str(port))
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr


@pytest.mark.parametrize(
    "name", ["airline", "banking", "calendar", "ecommerce", "library", "project_tracker"]
)
def test_every_builtin_passes_check_without_tests(name: str) -> None:
    result = arena("env", "check", name, "--no-tests")
    assert result.returncode == 0, result.stdout
