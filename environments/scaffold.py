"""``arena env new``: a working starter environment (schema, seed, tools, tests) to edit."""

from __future__ import annotations

from pathlib import Path
from string import Template

from environments.sdk.environment import ENV_NAME_PATTERN, EnvironmentSpecError

TEMPLATES = Path(__file__).parent / "templates"


def scaffold_environment(name: str, parent: Path) -> Path:
    """Create ``parent/name/`` with ``__init__.py`` and ``test_<name>.py``; refuse to overwrite."""
    if not ENV_NAME_PATTERN.match(name) or "/" in name:
        raise EnvironmentSpecError(
            f"environment name {name!r} must be lower-case letters, digits, '_' or '-'"
        )
    target = parent / name
    if target.exists():
        raise FileExistsError(f"{target} already exists; choose another name or directory")
    target.mkdir(parents=True)
    values = {"name": name, "title": name.replace("_", " ").replace("-", " ").title()}
    for template, output in (("env_init.py.tmpl", "__init__.py"), ("env_test.py.tmpl", f"test_{name}.py")):
        text = Template((TEMPLATES / template).read_text()).substitute(values)
        (target / output).write_text(text)
    return target.resolve()
