"""`arena env check` findings in one line each: undeclared writes, unsupported parameter types, where a
single file's tests go; the docstring rule for descriptions; how an MCP client connects over HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mcp import Client

from environments.checks import check_environment
from environments.sdk.tools import ToolDefinitionError, ToolSpec

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SHELF = README.split("```python\n", 1)[1].split("```", 1)[0]

SNEAKY_READ = '''

@env.tool
def peek(db: Session, book_id: int) -> dict:
    """Look at a book (and, by mistake, mark it on loan).

    Args:
        book_id: The book's id.
    """
    book = db.get(Book, book_id)
    if book is None:
        raise NotFound(f"no book {book_id}")
    book.on_loan = True
    return orm_to_dict(book)
'''


def _by_name(ref: str) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.detail) for c in check_environment(ref).checks}


def test_readme_single_file_passes_and_says_where_tests_go(tmp_path: Path) -> None:
    (tmp_path / "shelf.py").write_text(SHELF)
    checks = _by_name(str(tmp_path / "shelf.py"))
    assert all(ok for ok, _ in checks.values()), checks
    assert "test_shelf.py" in checks["own tests"][1]


def test_single_file_tests_beside_it_are_run(tmp_path: Path) -> None:
    (tmp_path / "shelf.py").write_text(SHELF)
    (tmp_path / "test_shelf.py").write_text("def test_fails():\n    assert False\n")
    (tmp_path / "test_unrelated.py").write_text("def test_ok():\n    pass\n")
    ok, detail = _by_name(str(tmp_path / "shelf.py"))["own tests"]
    assert not ok and "1 failed" in detail


def test_a_read_tool_that_writes_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "shelf.py").write_text(SHELF + SNEAKY_READ)
    ok, detail = _by_name(str(tmp_path / "shelf.py"))["read-only tools do not write"]
    assert not ok and "peek" in detail and "mutates=True" in detail and "\n" not in detail


def test_an_unsupported_parameter_type_is_one_line_naming_tool_and_parameter(tmp_path: Path) -> None:
    broken = SHELF.replace(
        "def lend(db: Session, book_id: int)", "def lend(db: Session, book_id: threading.Lock)"
    )
    (tmp_path / "shelf.py").write_text("import threading\n" + broken)
    report = check_environment(str(tmp_path / "shelf.py"))
    assert not report.ok
    detail = report.checks[0].detail
    assert "\n" not in detail and "'lend'" in detail and "'book_id'" in detail and "use str, int" in detail


def test_description_is_everything_before_the_first_section() -> None:
    def tool(db, x: int) -> int:
        """Find a thing.

        It is looked up by id.

        Args:
            x: The id.

        Returns:
            The thing.
        """
        return x

    def other(db) -> int:
        """Count things.

        Returns:
            How many.
        """
        return 0

    assert ToolSpec.from_function(tool).description == "Find a thing.\n\nIt is looked up by id."
    assert ToolSpec.from_function(other).description == "Count things."
    with pytest.raises(ToolDefinitionError):
        ToolSpec.from_function(lambda db, y: y)  # no docstring


async def test_http_serve_says_where_an_mcp_client_connects(tmp_path: Path) -> None:
    (tmp_path / "shelf.py").write_text(SHELF)
    shelf = str(tmp_path / "shelf.py")
    cmd = [sys.executable, "-m", "arena.cli.main", "env", "serve", shelf, "--port", "0", "--shared-mcp"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stderr.readline()), daemon=True)
        reader.start()
        reader.join(60)
        hint = lines[0] if lines else ""
        url = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", hint)
        assert url, hint
        async with Client(url.group(1)) as client:
            tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["lend"]
    finally:
        proc.terminate()
        proc.wait(10)
