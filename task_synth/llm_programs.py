"""LLM-written programmatic tasks, debugged by execution.

With an OpenAI-compatible endpoint configured, the model writes a request and a solution program (``def
solve(tools)``) from the environment profile. The program runs in the environment server's bubblewrap
sandbox (``environments/sandbox/``, ``docs/security.md``), never in the arena's process. A failure (an
exception with its traceback, a result that is not a JSON object of snake_case keys, too few tool calls
for the level, a request that names a tool, omits a key or quotes the answer) goes back to the model,
which fixes it, for a few rounds. What survives is a draft like any other: the synthesizer replays it in a
fresh session and checks its verifier and wrong-answer probes before keeping it. The verifier stays
declarative (the rubric of the replayed answer), so verifying a submission never runs generated code.
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass
from typing import Any

from task_synth.llm import LLMConfig
from task_synth.model import Knobs
from task_synth.profile import EnvProfile
from task_synth.runner import ProgramOutcome, ToolRunner
from task_synth.wording import leaks

logger = logging.getLogger(__name__)

DEBUG_ROUNDS = 3
FACTS_SHOWN = 12
_KEY = re.compile(r"[a-z][a-z0-9_]{0,40}")
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)

SYSTEM_PROMPT = """You write verifiable data tasks for an AI assistant that uses tools.
Given an environment's tools and some of its data, reply with ONE JSON object {"request": ..., "code": ...}:
- "request": what a user asks. It needs several tool calls, a loop over records, a condition and an
  aggregation across related records. It names no tool and does not reveal the answer. It states every
  value the assistant needs (names, ids, dates) and ends by asking for a JSON object with the exact keys
  the program returns, each in double quotes.
- "code": Python defining `def solve(tools):` that computes the exact answer. `tools.call(name, **arguments)`
  runs a tool and returns its JSON result, or raises ToolCallError (with .code and .message). Return a dict
  of snake_case keys to JSON values (numbers, strings, booleans, lists). Modules you may import: math,
  statistics, collections, itertools, functools, datetime, decimal, json, re. No files, no network."""


@dataclass(frozen=True)
class ProgramDraft:
    """A request and a program that ran: its answer and the calls it made."""

    request: str
    source: str
    answer: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]]


def _context(profile: EnvProfile, knobs: Knobs, rng: random.Random) -> str:
    tools = []
    for tool in profile.tools.values():
        params = ", ".join(f"{p.name}: {p.type}{'' if p.required else ' (optional)'}" for p in tool.params)
        fields = ", ".join(tool.output_fields[:20])
        summary = tool.description.splitlines()[0] if tool.description else ""
        returns = f"\n  returns{' a list of' if tool.returns_list else ''}: {fields}" if fields else ""
        tools.append(f"- {tool.name}({params}) [{tool.kind}]: {summary}{returns}")
    facts = rng.sample(profile.facts, min(FACTS_SHOWN, len(profile.facts)))
    data = "\n".join(
        f"- a {entity} has {column} = {json.dumps(value, default=str)}" for entity, column, value in facts
    )
    return (
        f"Environment: {profile.env}. {profile.description}\n\nTools:\n"
        + "\n".join(tools)
        + f"\n\nSome data:\n{data}\n\nDifficulty: the program should make at least {knobs.chain_length[0]} "
        "tool calls, use only read-only (query) tools, and combine at least two kinds of records."
    )


def _parse(text: str) -> tuple[str, str] | str:
    """(request, code) from the reply, or what is wrong with it."""
    found = _JSON_OBJECT.search(text or "")
    try:
        # strict=False: code written with raw newlines or tabs inside the JSON string is still read
        reply = json.loads(found.group(0), strict=False) if found else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        return 'the reply is not one JSON object {"request": ..., "code": ...}'
    request, code = reply.get("request"), reply.get("code")
    if not isinstance(request, str) or not request.strip() or not isinstance(code, str) or not code.strip():
        return '"request" and "code" must both be non-empty strings'
    return request.strip(), code


def _problem(request: str, run: ProgramOutcome, profile: EnvProfile, knobs: Knobs) -> str | None:
    """What is wrong with a program run and its request, in words for the model, or None."""
    if not run.ok:
        return f"Running solve(tools) failed:\n{run.error}"
    answer = run.value
    if not isinstance(answer, dict) or not answer:
        return "solve(tools) must return a non-empty dict"
    if bad := [k for k in answer if not isinstance(k, str) or not _KEY.fullmatch(k)]:
        return f"answer keys must be snake_case identifiers; got {bad[0]!r}"
    writes = sorted(
        {tool for tool, _ in run.calls if profile.tools.get(tool) and profile.tools[tool].mutates}
    )
    if writes:
        return f"the program must only read; it called {', '.join(writes)}"
    if len(run.calls) < knobs.chain_length[0]:
        return f"the program made {len(run.calls)} tool calls; it needs at least {knobs.chain_length[0]}"
    if missing := [k for k in answer if f'"{k}"' not in request]:
        return f'the request must ask for the key "{missing[0]}" (in double quotes)'
    if reason := leaks(request, answer, profile, set()):
        return f"the request {reason}; rewrite it"
    return None


async def draft_program(
    llm: LLMConfig, profile: EnvProfile, knobs: Knobs, runner: ToolRunner, rng: random.Random
) -> ProgramDraft | str:
    """Ask for a task and its program, run it in ``runner``'s session, and feed failures back; a draft, or
    why none came out (for a draft never fixed: what was wrong with the last round's)."""
    from openai import OpenAIError

    messages: list[dict[str, str]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": _context(profile, knobs, rng)},
    ]
    client = llm.client()
    last = ""
    try:
        for _ in range(DEBUG_ROUNDS):
            try:
                text = await llm.complete(client, messages, temperature=0.7)
            except OpenAIError as exc:
                logger.warning("LLM program synthesis failed: %s", exc)
                return "llm program: endpoint error"
            messages.append({"role": "assistant", "content": text})
            parsed = _parse(text)
            if isinstance(parsed, str):
                problem, last = parsed, "the reply was not the JSON object"
            else:
                request, source = parsed
                await runner.reset()
                run = await runner.run_program(source)
                problem = _problem(request, run, profile, knobs)
                if problem is None:
                    return ProgramDraft(request, source, run.value, run.calls)
                last = "the program failed when run" if not run.ok else "its answer or request was refused"
            messages.append(
                {"role": "user", "content": f"{problem}\nFix it and reply with the whole JSON object again."}
            )
        return f"llm program: not fixed in {DEBUG_ROUNDS} rounds (last: {last})"
    finally:
        await client.close()
