"""The Agent-World importer on releases it has never seen: small synthetic release folders written here.

One test per failure class of issue 13 (type names, release root, generated ids, randomness, clock,
source defects) and the import hygiene of issue 15 (symlinks, nesting, one bad environment, names,
task env paths, patterns).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from environments.importers.agentworld import import_directory, load_imported
from environments.importers.agentworld.determinism import call_seed, seeded_builtins
from environments.importers.agentworld.schemas import normalise_schema, safe_validator
from environments.importers.agentworld.store import read_manifest
from environments.registry import UnknownEnvironment, load_environment

PRELUDE = (
    "import json, os, random, uuid, datetime\n"
    "    _DB = os.environ['MCP_DB_DIR']\n"
    "    def _load():\n"
    "        return json.load(open(os.path.join(_DB, 'items.json')))\n"
    "    def _save(d):\n"
    "        json.dump(d, open(os.path.join(_DB, 'items.json'), 'w'))\n"
)
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    # generates an id (random) and stores the item
    "create_item": (
        "def create_item(name):\n    " + PRELUDE + "    items = _load()\n"
        "    item = {'id': 'itm_' + uuid.uuid4().hex, 'name': name}\n"
        "    items.append(item)\n    _save(items)\n    return {'item': item}\n",
        {"name": {"type": "str"}},
    ),
    # needs the generated id of an earlier step
    "get_item": (
        "def get_item(item_id):\n    " + PRELUDE + "    for item in _load():\n"
        "        if item['id'] == item_id:\n            return {'item': item, 'found': True}\n"
        "    return {'error': {'code': 'NOT_FOUND', 'message': 'no item'}}\n",
        {"item_id": {"type": "string", "pattern": "^itm_0[0-9a-f]+$"}},
    ),
    # randomness that changes the structure of the answer
    "roll": (
        "def roll(sides):\n    "
        + PRELUDE
        + "    return {'rolls': list(range(random.randint(1, int(sides))))}\n",
        {"sides": {"type": "int"}},
    ),
    # a value derived from the clock that holds no reading of it
    "next_review": (
        "def next_review():\n    "
        + PRELUDE
        + "    when = datetime.datetime.now() + datetime.timedelta(days=400)\n"
        "    return {'review_on': when.date().isoformat()}\n",
        {},
    ),
    # a source defect: raises, but the chain goes on
    "broken": ("def broken():\n    " + PRELUDE + "    return 1 / 0\n", {}),
    "count": ("def count():\n    " + PRELUDE + "    return {'count': len(_load())}\n", {}),
}
SEED_ITEMS = [{"id": "itm_seed", "name": "seed"}]


def _tool(name: str) -> dict[str, Any]:
    source, properties = TOOLS[name]
    return {
        "name": name,
        "description": name,
        "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        "implementation": source,
    }


def _question(task: str, chain: list[tuple[str, dict[str, Any]]], answer: Any) -> dict[str, Any]:
    return {
        "task": task,
        "reference_answer": json.dumps(answer),
        "grading_rubric": {
            "success_criteria": ["answer"],
            "verified_tool_chain": [{"tool": t, "args": a} for t, a in chain],
        },
    }


def write_env(
    folder: Path, env_id: str, questions: list[dict[str, Any]], *, declared: tuple[str, ...] = ("items.json",)
) -> Path:
    """One environment in the release layout: data folder, checkpoint, questions."""
    (folder / env_id).mkdir(parents=True)
    (folder / "questions").mkdir(exist_ok=True)
    (folder / env_id / "items.json").write_text(json.dumps(SEED_ITEMS))
    checkpoint = {
        "local_files_dir": f"./environment_mix/{env_id}",
        "data": {
            "DatabaseAgent": {"files_summary": {path: "rows" for path in declared}},
            "ToolDesignAgent": {"tool_schemas": [_tool(name) for name in TOOLS]},
        },
        "metadata": {"name": f"Synthetic {env_id}"},
    }
    (folder / f"{env_id}_step4_checkpoint.json").write_text(json.dumps(checkpoint))
    (folder / "questions" / f"{env_id}.json").write_text(json.dumps({"tasks": questions}))
    return folder / env_id


ORIGINAL_ID = "itm_1f2e3d4c5b6a79880716253443526170"  # what create_item generated in the "original run"


def replay_questions() -> list[dict[str, Any]]:
    return [
        # 0: generated id bound from step 0 into step 1; the id itself is random (forgiven)
        _question(
            "Create Widget and read it back.",
            [("create_item", {"name": "Widget"}), ("get_item", {"item_id": ORIGINAL_ID})],
            {"item": {"id": ORIGINAL_ID, "name": "Widget"}, "found": True},
        ),
        # 1: the number of rolls is random
        _question("Roll.", [("roll", {"sides": 50})], {"rolls": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}),
        # 2: derived from the clock
        _question("When is the review?", [("next_review", {})], {"review_on": "2027-09-09"}),
        # 3: a released implementation raises (source defect); the answer still matches
        _question("Count items.", [("broken", {}), ("count", {})], {"count": 1}),
        # 4: a plain mismatch
        _question("Count items.", [("count", {})], {"count": 7}),
    ]


# -- import: type names, release root, hygiene -------------------------------------------------


def test_python_type_names_are_normalised_and_recorded(tmp_path: Path) -> None:
    write_env(tmp_path / "release" / "environment_mix", "0000001", [])
    report = import_directory(tmp_path / "release", tmp_path / "imported", replay=False, progress=False)
    assert [r.env_id for r in report.imported] == ["0000001"], (
        "the release root (holding environment_mix/) imports"
    )
    tools = {t["name"]: t for t in read_manifest(tmp_path / "imported" / "agentworld" / "0000001")["tools"]}
    assert tools["create_item"]["parameters"]["properties"]["name"]["type"] == "string"
    assert tools["create_item"]["schema_changes"] == ["$.properties.name.type: 'str' -> 'string'"]
    assert tools["roll"]["parameters"]["properties"]["sides"]["type"] == "integer"
    schema, changes = normalise_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "float"}, "b": {"type": ["Dict", "None"]}, "c": {"type": "any"}},
        }
    )
    assert schema["properties"] == {"a": {"type": "number"}, "b": {"type": ["object", "null"]}, "c": {}}
    assert len(changes) == 3


def test_one_bad_environment_is_skipped_with_its_reason(tmp_path: Path) -> None:
    release = tmp_path / "environment_mix"
    write_env(release, "0000001", [])
    deep = write_env(release, "0000002", [])
    (deep / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    write_env(release, "0000003", [], declared=("items.json", "accounts.json"))
    linked = write_env(release, "0000004", [])
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host file content")
    (linked / "notes.txt").symlink_to(secret)
    (release / "0000005_step4_checkpoint.json").symlink_to(release / "0000001_step4_checkpoint.json")
    (release / "0000005").mkdir()
    report = import_directory(release, tmp_path / "imported", replay=False, progress=False)
    skipped = {s["id"]: s["reason"] for s in report.to_json()["skipped"]}
    assert "nested deeper than 64 levels" in skipped["0000002"]
    assert "lacks 1 of the 2 data files its checkpoint declares: accounts.json" in skipped["0000003"]
    assert "symbolic link" in skipped["0000005"]
    assert sorted(r.env_id for r in report.imported) == ["0000001", "0000004"]
    data = tmp_path / "imported" / "agentworld" / "0000004" / "data"
    assert sorted(p.name for p in data.iterdir()) == ["items.json"], "a symlinked file is not followed"


def test_environment_names_cannot_traverse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / "elsewhere", "x", [])
    import_directory(tmp_path / "elsewhere", tmp_path / "outside", replay=False, progress=False)
    monkeypatch.setenv("ARENA_IMPORTED_DIR", str(tmp_path / "imported" / "a"))
    for name in ("agentworld/../../outside/agentworld/x", "agentworld/..", "agentworld/a/b"):
        with pytest.raises(UnknownEnvironment):
            load_imported(name)
        with pytest.raises(UnknownEnvironment):
            load_environment(name)


async def test_a_stored_task_env_is_never_a_path(tmp_path: Path) -> None:
    from arena.cli.tasks import environment_of, verify
    from tests.task_samples import state_task

    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    task = state_task().model_copy(update={"env": str(evil)})
    with pytest.raises(UnknownEnvironment):
        environment_of(task, None)
    with pytest.raises(UnknownEnvironment):
        await verify(task, {"calls": []})
    assert not marker.exists()


def test_patterns_are_checked_safely_or_dropped() -> None:
    schema, changes = normalise_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}, "b": {"pattern": "("}},
        }
    )
    assert "pattern" not in schema["properties"]["a"] and "pattern" not in schema["properties"]["b"]
    assert any("catastrophic" in c for c in changes) and any("does not compile" in c for c in changes)
    # A pattern that slips through the static check still cannot block: matching is time-limited.
    validator = safe_validator(
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a|aa)*c$"}}}
    )
    started = time.perf_counter()
    errors = list(validator.iter_errors({"x": "a" * 5000 + "b"}))
    assert errors and time.perf_counter() - started < 2
    assert not list(validator.iter_errors({"x": "aac"}))


def test_a_pattern_the_release_itself_violates_is_dropped(tmp_path: Path) -> None:
    question = _question(
        "Read it.", [("get_item", {"item_id": "itm_seed"})], {"item": SEED_ITEMS[0], "found": True}
    )
    write_env(tmp_path / "environment_mix", "0000001", [question])
    import_directory(tmp_path / "environment_mix", tmp_path / "imported", replay=False, progress=False)
    tools = {t["name"]: t for t in read_manifest(tmp_path / "imported" / "agentworld" / "0000001")["tools"]}
    assert "pattern" not in tools["get_item"]["parameters"]["properties"]["item_id"]
    assert tools["get_item"]["schema_changes"] == [
        "$.properties.item_id.pattern dropped: rejects 'itm_seed' of question 0 step 0"
    ]


def test_randomness_is_seeded_per_call() -> None:
    code = compile(
        "import random, secrets, uuid, os\n"
        "from random import randint\n"
        "out = (str(uuid.uuid4()), secrets.token_hex(8), os.urandom(4).hex(), randint(0, 10**9),\n"
        "       random.Random().random(), random.SystemRandom().random(), os.path.join('a', 'b'))\n",
        "<released>",
        "exec",
    )

    def run(salt: str) -> tuple[Any, ...]:
        namespace: dict[str, Any] = {
            "__builtins__": seeded_builtins(call_seed(salt, "digest", "t", {"a": 1}))
        }
        exec(code, namespace)
        return namespace["out"]

    first, again, other = run(""), run(""), run("other salt")
    assert first == again and first[-1] == "a/b"
    assert all(a != b for a, b in zip(first[:-1], other[:-1], strict=True))
    before = random.getstate()
    run("")
    assert random.getstate() == before, "the process's own modules are not touched"
    assert os.urandom(16) != os.urandom(16)


# -- replay: bindings, random, clock, defects, mismatch (one server run, one alternative run) -----


@pytest.mark.slow
def test_replay_groups_every_question(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from task_synth.imported import imported_question_tasks
    from task_synth.verify import verify

    write_env(tmp_path / "environment_mix", "0000001", replay_questions())
    report = import_directory(tmp_path / "environment_mix", tmp_path / "imported", progress=False)
    assert report.to_json()["verdicts"] == {
        "reproduced": 2,
        "not_reproducible: random": 1,
        "not_reproducible: clock": 1,
        "mismatch": 1,
    }
    replay = json.loads((tmp_path / "imported" / "agentworld" / "0000001" / "replay.json").read_text())
    questions = replay["questions"]
    bound = questions[0]["bindings"][0]
    assert (bound["step"], bound["argument"], bound["original"], bound["from_step"]) == (
        1,
        "item_id",
        ORIGINAL_ID,
        0,
    )
    assert bound["bound"] != ORIGINAL_ID and bound["path"] == "$.item.id"
    assert questions[0]["verdict"] == "reproduced" and questions[0]["random"] == ["$.item.id"]
    assert questions[1]["verdict"] == "not_reproducible: random"
    assert questions[2]["verdict"] == "not_reproducible: clock"
    assert questions[3]["verdict"] == "reproduced" and questions[3]["replayed"]
    assert "ZeroDivisionError" in questions[3]["defects"][0]
    assert questions[4]["verdict"] == "mismatch"
    # Imported tasks: only reproduced questions; a fresh draw of a seed-dependent field is accepted.
    monkeypatch.setenv("ARENA_IMPORTED_DIR", str(tmp_path / "imported"))
    tasks = imported_question_tasks("agentworld/0000001")
    assert [t.provenance["question_index"] for t in tasks] == [0, 3]
    assert tasks[0].provenance["not_reproducible"] == ["$.item.id"]
    fresh = {"item": {"id": "itm_" + uuid.uuid4().hex, "name": "Widget"}, "found": True}
    assert verify(tasks[0], fresh, None).passed
    assert not verify(tasks[0], {**fresh, "item": {**fresh["item"], "name": "Gadget"}}, None).passed
    assert not verify(tasks[0], {**fresh, "item": {**fresh["item"], "id": "itm_short"}}, None).passed


def test_replay_servers_run_under_rlimits() -> None:
    import resource
    import subprocess
    import sys

    from environments.importers.agentworld.replay import REPLAY_LIMITS, apply_replay_limits

    probe = "import resource as r; print(r.getrlimit(r.RLIMIT_AS)[0], r.getrlimit(r.RLIMIT_NOFILE)[0])"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=apply_replay_limits,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [int(v) for v in out] == [REPLAY_LIMITS[resource.RLIMIT_AS], REPLAY_LIMITS[resource.RLIMIT_NOFILE]]


def test_seed_dependent_leaves_are_forgiven_only_in_the_reference_shape() -> None:
    from datetime import UTC, datetime

    from environments.importers.agentworld.answers import ClockWindow, mask_time, match_answer

    now = datetime.now(UTC)
    window = ClockWindow.around(now, now)
    ref = {"id": "pmc_afc_19fcfb7955c62c8fb9a9c2a", "n": 1}
    out, alt = (
        {"id": "pmc_afc_1a21a3b8db3f3ee2d406c3", "n": 1},
        {"id": "pmc_afc_1a21a3b93ad51df11a9bd17", "n": 1},
    )
    found = match_answer(ref, out, window, alt)
    assert found is not None and found.random == ("$.id",), "a length that varies with the seed is allowed"
    assert match_answer(ref, out, window, {"id": "pmc_afc_0a21a3b8db3f3ee2d406c3", "n": 1}) is None
    assert match_answer(ref, out, window) is None, "without a second run nothing is known to be random"
    assert match_answer({**ref, "id": "key_19fcfb7955c62c8fb9a9c2a"}, out, window, alt) is None
    assert mask_time("wf_9066c76b1451234567890d4da4ab") == "wf_9066c76b1451234567890d4da4ab"
