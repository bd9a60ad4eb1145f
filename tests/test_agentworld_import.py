"""The Agent-World importer on the shared release samples: import, serve, isolate, replay, reject."""

from __future__ import annotations

import csv
import json
import shutil
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client

from environments.importers.agentworld import (
    ImportReport,
    import_directory,
    list_imported,
    load_imported,
    load_questions,
)
from environments.importers.agentworld.answers import ClockWindow, match_answer, match_truncated
from environments.importers.agentworld.release import read_files
from environments.importers.agentworld.state import StatePlan, compose, decompose
from environments.importers.agentworld.store import IMPORTED_DIR_ENV
from environments.importers.agentworld.tools import map_error_code, released_error, static_write_reason
from environments.importers.cli import run_import
from environments.registry import load_environment
from environments.sdk.errors import ErrorCode
from environments.sdk.state import StateStore
from environments.serving.process import ServerProcess

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "agentworld"
RELEASE = SHARED / "environment_mix"
# api_request_logs.json of 0083000 gained 7 entries while the release generated its questions,
# after index.csv counted 18 per file; every other environment matches index.csv exactly.
LOG_GROWTH = {"0083000": 7}

pytestmark = pytest.mark.skipif(not RELEASE.is_dir(), reason=f"Agent-World samples not found at {RELEASE}")


def _index() -> dict[str, dict[str, str]]:
    with (RELEASE / "index.csv").open(encoding="utf-8", newline="") as handle:
        return {row["env_id"]: row for row in csv.DictReader(handle)}


def _sample_ids() -> list[str]:
    return sorted(p.name for p in RELEASE.iterdir() if p.is_dir() and p.name != "questions")


BUILT_ON = ("0031000", "0061000", "0083000", "0310000", "0357000", "0520000", "0538000", "0546000")
"""The eight environments the importer was built on: the exact figures below are pinned on them. The
shared sample has grown since; the importer's general rules are tested on synthetic releases in
tests/test_agentworld_unseen.py, and the whole sample's figures are in docs/importers.md."""


def _writable_copy(target: Path, ids: tuple[str, ...] = BUILT_ON) -> Path:
    """A writable release folder with the environments ``ids`` (data, tools, questions, index)."""
    (target / "questions").mkdir(parents=True)
    shutil.copy(RELEASE / "index.csv", target / "index.csv")
    for env_id in ids:
        shutil.copytree(RELEASE / env_id, target / env_id)
        shutil.copy(RELEASE / f"{env_id}_step4_checkpoint.json", target)
        shutil.copy(RELEASE / "questions" / f"{env_id}.json", target / "questions")
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


def _edit_checkpoint(release: Path, env_id: str, edit: object) -> None:
    path = release / f"{env_id}_step4_checkpoint.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data["data"]["ToolDesignAgent"]["tool_schemas"])  # type: ignore[operator]
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ARENA_HOME for this module (inherited by server child processes)."""
    path = tmp_path_factory.mktemp("arena-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARENA_HOME", str(path))
        patch.delenv(IMPORTED_DIR_ENV, raising=False)
        yield path


@pytest.fixture(scope="module")
def built_on(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _writable_copy(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def report(home: Path, built_on: Path) -> ImportReport:
    return import_directory(built_on, progress=False)


# -- import, counts, replay ---------------------------------------------------------------------


@pytest.mark.slow
def test_import_counts_match_the_release(report: ImportReport, home: Path) -> None:
    index = _index()
    rows = {row.env_id: row for row in report.rows}
    assert sorted(rows) == list(BUILT_ON)
    for env_id, row in rows.items():
        expected = index[env_id]
        assert row.status == "replayed", row.reason
        assert row.tools == int(expected["n_tools"]) == int(expected["tools_loadable"])
        assert row.questions == int(expected["n_questions"])
        assert row.collections == int(expected["n_collections"])
        assert row.records == int(expected["n_records"]) + LOG_GROWTH.get(env_id, 0)
        assert row.name == expected["name"]
    assert list_imported() == [f"agentworld/{i}" for i in BUILT_ON]
    assert (home / "imported" / "agentworld" / "0061000" / "manifest.json").is_file()


@pytest.mark.slow
def test_replay_numbers_are_reported(report: ImportReport, home: Path) -> None:
    totals = report.to_json()
    assert {"environments", "tools", "questions", "replayed", "reproduced", "skipped"} <= totals.keys()
    assert totals["environments"] == 8 and totals["tools"] == 55 and totals["questions"] == 24
    assert totals["replayed"] == 24 and totals["reproduced"] == 24
    assert totals["verdicts"]["reproduced"] == 24
    assert totals["skipped"] == []
    replay = json.loads((home / "imported" / "agentworld" / "0061000" / "replay.json").read_text())
    forgiven = [path for q in replay["questions"] for path in q["forgiven"]]
    assert "$.events[0].uid" in forgiven, "clock-derived ids (evt-<epoch ms>) are forgiven"


@pytest.mark.slow
def test_imported_environment_resolves_through_the_registry(report: ImportReport) -> None:
    env = load_environment("agentworld/0061000")
    info = env.describe()
    assert info["category"] == "Communication & General Utilities"
    assert info["theme"] == "Calendar Events & Directories"
    tools = {t["name"]: t for t in info["tools"]}
    assert len(tools) == 6
    assert tools["get_events"]["input_schema"]["required"] == ["calendar_name"]
    assert not tools["list_calendars"]["mutates"] and tools["add_event"]["mutates"]
    store = StateStore(env)
    try:
        counts = store.table_counts()
    finally:
        store.close_all()
    assert counts["calendars.json/team_qc"] == 24 and counts["calendars.json/suppliers"] == 5


@pytest.mark.slow
def test_questions_are_kept_with_the_import(report: ImportReport) -> None:
    questions = load_questions("agentworld/0061000")
    assert len(questions) == 3
    first = questions[0]
    assert first.reference_valid and first.reference_answer["calendar_name"] == "suppliers"
    assert [c.tool for c in first.verified_tool_chain] == [
        "list_calendars",
        "add_event",
        "find_events",
        "get_events",
    ]
    assert first.success_criteria and first.env == "agentworld/0061000"
    truncated = load_questions("0357000")
    assert not truncated[0].reference_valid and truncated[0].reference_answer is None
    assert truncated[0].reference_text.startswith('{"data": [')


# -- serving through MCP: isolation, diff, reset, error mapping ---------------------------------


@pytest.fixture(scope="module")
def calendar_server(report: ImportReport) -> Iterator[ServerProcess]:
    server = ServerProcess("agentworld/0061000").start()
    yield server
    server.stop()


async def _calendar_names(client: Client) -> set[str]:
    result = await client.call_tool("list_calendars", {})
    assert not result.is_error
    return {c["name"] for c in result.structured_content["result"]}


@pytest.mark.slow
async def test_mcp_sessions_are_isolated_and_reset(calendar_server: ServerProcess) -> None:
    control = calendar_server.control()
    info = await control.info()
    first, second = await control.create_session(), await control.create_session()
    event = {
        "calendar_name": "suppliers",
        "summary": "Sync",
        "dtstart": "2026-01-05T10:00:00",
        "dtend": "2026-01-05T10:30:00",
        "uid": "evt-test-1",
    }
    async with Client(control.mcp_url(first)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {
            "list_calendars",
            "get_events",
            "find_events",
            "add_event",
            "delete_event",
            "create_calendar",
        }
        assert tools["list_calendars"].annotations.read_only_hint
        created = await client.call_tool("create_calendar", {"name": "ops"})
        assert not created.is_error and created.structured_content["calendar"]["name"] == "ops"
        added = await client.call_tool("add_event", event)
        assert not added.is_error and added.structured_content["uid"] == "evt-test-1"
        assert "ops" in await _calendar_names(client)
    async with Client(control.mcp_url(second)) as client:
        assert "ops" not in await _calendar_names(client)
        found = await client.call_tool(
            "find_events", {"calendar_name": "suppliers", "summary_contains": "Sync"}
        )
        assert found.structured_content["total"] == 0
    diff = await control.diff(first)
    assert [row["key"] for row in diff["calendars.json/suppliers"]["inserted"]] == ["evt-test-1"]
    assert [row["key"] for row in diff["calendars.json"]["inserted"]] == ["ops"]
    assert "calendars.json/team_qc" not in diff, "unchanged collections do not appear in the diff"
    await control.reset(first)
    assert await control.state_hash(first) == info["seed_hash"]
    for sid in (first, second):
        await control.close_session(sid)
    await control.aclose()


@pytest.mark.slow
async def test_released_errors_become_typed_tool_errors(calendar_server: ServerProcess) -> None:
    control = calendar_server.control()
    sid = await control.create_session()
    async with Client(control.mcp_url(sid)) as client:
        missing = await client.call_tool("get_events", {"calendar_name": "nope"})
        assert missing.is_error
        error = missing.structured_content["error"]
        assert error["code"] == "NOT_FOUND" and error["details"]["source_code"] == "NOT_FOUND"
        invalid = await client.call_tool("get_events", {"start": 3})
        assert invalid.structured_content["error"]["code"] == "VALIDATION_ERROR"
        conflict = await client.call_tool("create_calendar", {"name": "suppliers"})
        assert conflict.structured_content["error"]["code"] == "CONFLICT"
    assert await control.diff(sid) == {}, "a failed call's writes (their audit log line) are rolled back"
    await control.close_session(sid)
    await control.aclose()


# -- malformed environments and confinement ---------------------------------------------------


def test_malformed_environments_are_skipped_with_a_reason(tmp_path: Path) -> None:
    release = _writable_copy(tmp_path / "release")
    (release / "0310000_step4_checkpoint.json").write_text('{"data": {', encoding="utf-8")
    _edit_checkpoint(release, "0520000", lambda tools: tools[0].update(implementation="def broken(:\n"))
    _edit_checkpoint(
        release,
        "0538000",
        lambda tools: tools[0].update(parameters={"type": "object", "properties": {"x": 5}}),
    )
    (release / "0546000_step4_checkpoint.json").unlink()
    report = import_directory(release, tmp_path / "imported", replay=False, progress=False)
    skipped = {s["id"]: s["reason"] for s in report.to_json()["skipped"]}
    assert set(skipped) == {"0310000", "0520000", "0538000", "0546000"}
    assert "not valid JSON" in skipped["0310000"]
    assert "does not compile" in skipped["0520000"]
    assert "not valid JSON Schema" in skipped["0538000"]
    assert "missing checkpoint" in skipped["0546000"]
    assert {r.env_id for r in report.imported} == {"0031000", "0061000", "0083000", "0357000"}


async def test_loading_runs_no_released_code_and_serving_does(tmp_path: Path) -> None:
    release = _writable_copy(tmp_path / "release")
    marker = tmp_path / "executed.txt"
    # In-process this would write the host file; in the sandbox the host path does not exist.
    payload = (
        f"try:\n    open({str(marker)!r}, 'w').write(str(__import__('os').getpid()))\n"
        "except OSError:\n    pass\n"
    )

    def plant(tools: list[dict]) -> None:
        tool = next(t for t in tools if t["name"] == "get_users")
        tool["implementation"] = payload + tool["implementation"]

    _edit_checkpoint(release, "0310000", plant)
    root = tmp_path / "imported"
    report = import_directory(release, root, replay=False, progress=False)
    assert "0310000" in {r.env_id for r in report.imported}
    env = load_imported("agentworld/0310000", root)
    env.describe()
    StateStore(env).close_all()
    assert not marker.exists(), "loading, describing and seeding must not execute released code"
    server = ServerProcess("agentworld/0310000", extra_env={IMPORTED_DIR_ENV: str(root)}).start()
    try:
        control = server.control()
        sid = await control.create_session()
        assert (await control.call(sid, "get_users", {}))["ok"]
        await control.aclose()
    finally:
        server.stop()
    assert not marker.exists(), "released code ran (get_users answered) in a sandbox without host files"


def test_cli_prints_a_table_and_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, built_on: Path
) -> None:
    monkeypatch.setenv(IMPORTED_DIR_ENV, str(tmp_path / "imported"))
    assert run_import("agentworld", built_on, replay=False) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["environments"] == 8 and summary["tools"] == 55 and summary["replay_run"] is False
    assert any("0061000" in line and "Chrona" in line for line in lines[:-1])
    (tmp_path / "empty").mkdir()
    assert run_import("agentworld", tmp_path / "empty", replay=False) == 1
    assert run_import("nonesuch", built_on) == 2


# -- units: state model, error mapping, static scan, replay rule ---------------------------------


@pytest.mark.parametrize("env_id", _sample_ids() if RELEASE.is_dir() else [])
def test_files_round_trip_through_rows(env_id: str) -> None:
    files = read_files(RELEASE / env_id)
    plan = StatePlan.from_seed(files)
    for path, data in files.items():
        row, rows = decompose(plan.plan_for(path), data)
        rebuilt = compose(plan.plan_for(path), row, rows)
        if path.endswith(".json"):
            original, again = json.loads(data), json.loads(rebuilt)
            assert again == original
            assert json.dumps(again) == json.dumps(original), "the seed's key order is restored"
        elif path.endswith(".csv"):
            assert list(csv.reader(rebuilt.decode().splitlines())) == list(
                csv.reader(data.decode().splitlines())
            )
        else:
            assert rebuilt == data


def test_stored_rows_do_not_depend_on_key_order() -> None:
    plan = StatePlan.from_seed({"items.json": b'[{"id": 1, "a": 1, "b": 2}]'})
    one = decompose(plan.plan_for("items.json"), b'[{"id": 1, "a": 1, "b": 2}]')
    two = decompose(plan.plan_for("items.json"), b'[{"b": 2, "id": 1, "a": 1}]')
    assert one == two
    assert one[1] == {"items.json": {"1": '{"a":1,"b":2,"id":1}'}}


def test_error_codes_are_mapped() -> None:
    assert map_error_code("UNAUTHORIZED") is ErrorCode.FORBIDDEN
    assert map_error_code("RATE_LIMIT") is ErrorCode.LIMIT_EXCEEDED
    assert map_error_code("QUOTA_EXCEEDED") is ErrorCode.LIMIT_EXCEEDED
    assert map_error_code("Tweet with ID 4 not found.") is ErrorCode.NOT_FOUND
    odd = released_error({"error": {"code": "TEAPOT", "message": "short and stout", "spout": 1}})
    assert odd is not None and odd.code is ErrorCode.PRECONDITION_FAILED
    assert odd.details == {"source_code": "TEAPOT", "spout": 1}
    assert released_error({"found": False}) is None


def test_static_scan_finds_writes() -> None:
    import ast

    assert static_write_reason(ast.parse("def f():\n    json.dump(x, open(p, 'w'))\n"))
    assert static_write_reason(ast.parse("def f():\n    os.remove(p)\n"))
    assert static_write_reason(ast.parse("def f():\n    return json.load(open(p))\n")) is None
    assert (
        static_write_reason(ast.parse("def f(xs):\n    xs.remove(1)\n    return ''.replace('a', 'b')\n"))
        is None
    )


def test_replay_rule_forgives_only_clock_readings() -> None:
    now = datetime.now(UTC)
    window = ClockWindow.around(now, now)
    stamp_ms = str(int(now.timestamp() * 1000))
    ref = {
        "uid": "evt-1785900022697",
        "dtstart": "2026-08-07T15:00:00",
        "latency_ms": 12,
        "at": "2026-08-05T08:33:45Z",
    }
    out = {"uid": f"evt-{stamp_ms}", "dtstart": "2026-08-07T15:00:00", "latency_ms": 3, "at": now.isoformat()}
    match = match_answer(ref, out, window)
    assert match is not None and set(match.forgiven) == {"$.uid", "$.latency_ms", "$.at"}
    assert match_answer(ref, {**out, "dtstart": "2026-08-08T15:00:00"}, window) is None
    assert match_answer(ref, {**out, "extra": 1}, window) is None
    assert match_answer([1, 2], [2, 1], window) is None
    assert match_truncated('{"data": [{"id": "p-1", "name": "Mou', {"data": [{"id": "p-1", "name": "Mouse"}]})
    assert (
        match_truncated('{"data": [{"id": "p-2", "name": "Mou', {"data": [{"id": "p-1", "name": "Mouse"}]})
        is None
    )
