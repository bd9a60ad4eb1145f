"""Offline wording: deterministic templates that turn a chain or program into a request.

The request names no tool and quotes no answer value (``leaks`` checks both). Literal arguments are
always stated (otherwise the task would be unsolvable); values passed between steps are stated only
at levels without hidden references. Answer keys are named after entities and fields.
"""

from __future__ import annotations

import random
import re
from typing import Any

from task_synth.chains import Chain
from task_synth.model import AggregateStep, CallStep, ForEachStep, Knobs, Ref, Solution
from task_synth.profile import EnvProfile, ToolProfile
from task_synth.program import resolve
from task_synth.values import VERBS, singular

_FIRST_CLAUSE = re.compile(
    r"^(.*?)(?:[.;:]\s|[.;:]$|,\s(?:with|and|sorted|earliest|newest|oldest)\b|$)", re.S
)
_OPS = {"eq": "is", "ne": "is not", "gt": "is above", "ge": "is at least", "lt": "is below",
        "le": "is at most", "contains": "contains"}  # fmt: skip


def _label(name: str) -> str:
    return name.replace("_", " ").replace(".", " ")


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _value(value: Any) -> str:
    return (
        f"'{value}'"
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def purpose(tool: ToolProfile) -> str:
    """The first clause of a tool's description as an instruction: 'Cancel a booking; ...' -> 'cancel a
    booking'; a noun phrase ('Per-branch figures: ...') becomes 'look up per-branch figures'."""
    text = " ".join(tool.description.split())
    clause = (_FIRST_CLAUSE.match(text).group(1) if text else "") or f"the {tool.entity}"
    clause = clause[0].lower() + clause[1:]
    first = clause.split(" ", 1)[0]
    # A writing tool's description opens with what it does ("Extend an active loan..."), a verb even
    # when it is not one of the common ones.
    imperative = tool.mutates or first in VERBS or (first.endswith("e") and first + "s" in VERBS)
    return clause if imperative else f"look up {clause}"


def _source_entity(chain: Chain, index: int, profile: EnvProfile) -> str:
    """What a step's input comes from: the previous entity, or the items of the list it picked from."""
    ref = next(iter(chain.steps[index].bindings.values()))
    head = ref.path.split("[", 1)[0]
    if chain.info[index].selector is not None and head:
        return singular(head.rsplit(".", 1)[-1])
    return profile.tools[chain.steps[ref.step].tool].entity


def arguments_phrase(arguments: dict[str, Any]) -> str:
    parts = [f"{_label(k)} {_value(v)}" for k, v in arguments.items()]
    return " and ".join(parts)


def _step_sentence(chain: Chain, index: int, profile: EnvProfile, knobs: Knobs, entities: list[str]) -> str:
    step = chain.steps[index]
    tool = profile.tools[step.tool]
    action = purpose(tool)
    literal = arguments_phrase(step.arguments)
    if index == 0:
        return f"First, {action}" + (f" for {literal}." if literal else ".")
    info = chain.info[index]
    if not step.bindings:
        return f"Separately, {action}" + (f" for {literal}." if literal else ".")
    source = _source_entity(chain, index, profile)
    sentence = f"Then, for the {source}"
    if info.selector is not None:
        field, value = info.selector
        sentence += f" among those results whose {_label(field)} is {_value(value)}"
    else:
        sentence += " found"
    if not knobs.hidden_references:
        given = {k: resolve(r, chain.outputs) for k, r in step.bindings.items()}
        sentence += f" ({arguments_phrase(given)})"
    sentence += f", {action}"
    return sentence + (f" with {literal}." if literal else ".")


def _goal_sentence(chain: Chain, profile: EnvProfile) -> str:
    """Hidden references: the path from the named entities to the goal; no intermediate value is given
    and lookups along the way are not spelled out."""
    start = profile.tools[chain.steps[0].tool]
    named = arguments_phrase(chain.steps[0].arguments)
    pieces = [purpose(start) + (f" for {named}" if named else "")]
    for index in range(1, len(chain.steps)):
        step = chain.steps[index]
        tool = profile.tools[step.tool]
        literal = f" with {arguments_phrase(step.arguments)}" if step.arguments else ""
        if not step.bindings:
            pieces.append(f"separately {purpose(tool)}{literal}")
            continue
        source = _source_entity(chain, index, profile)
        hop = f"the {source}"
        if (selector := chain.info[index].selector) is not None:
            hop += f" whose {_label(selector[0])} is {_value(selector[1])}"
        if tool.mutates or tool.returns_list:
            action = purpose(tool)
        else:
            action = "look up its full record" if tool.entity == source else f"find its {tool.entity}"
        pieces.append(f"for {hop}, {action}{literal}")
    return "Your goal: " + "; then ".join(pieces) + "."


def answer_sentence(answer: dict[str, Ref], describe: dict[str, str]) -> str:
    if not answer:
        return "No written answer is needed: what counts is the change made to the records."
    keys = ", ".join(f'"{key}" ({describe[key]})' for key in answer)
    return f"Reply with a JSON object with the keys {keys}."


def describe_keys(answer: dict[str, Ref], chain_entities: list[str]) -> dict[str, str]:
    described = {}
    for key, ref in answer.items():
        if "[*]" in ref.path:
            head = ref.path.split("[", 1)[0]
            entity = singular(head.rsplit(".", 1)[-1]) if head else chain_entities[ref.step]
            described[key] = f"the ids of the {entity} records found, as a list"
        else:
            entity = chain_entities[ref.step]
            described[key] = f"the {entity}'s {_label(ref.path.removeprefix(f'{entity}.'))}"
    return described


def distractor_sentences(profile: EnvProfile, avoid: set[str], count: int, rng: random.Random) -> list[str]:
    facts = [f for f in profile.facts if f[0] not in avoid]
    return [
        f"(Unrelated to this request: {_article(entity)} {entity} on file has "
        f"{_label(column)} {_value(value)}.)"
        for entity, column, value in rng.sample(facts, min(count, len(facts)))
    ]


def chain_request(
    chain: Chain, answer: dict[str, Ref], profile: EnvProfile, knobs: Knobs, rng: random.Random
) -> str:
    entities = [profile.tools[s.tool].entity for s in chain.steps]
    if knobs.hidden_references:
        body = [_goal_sentence(chain, profile)]
    else:
        body = [_step_sentence(chain, i, profile, knobs, entities) for i in range(len(chain.steps))]
    body.append(answer_sentence(answer, describe_keys(answer, entities)))
    body += distractor_sentences(profile, set(entities), knobs.distractors, rng)
    return " ".join(body)


def program_request(
    solution: Solution, profile: EnvProfile, key: str, rng: random.Random, knobs: Knobs
) -> str:
    """Wording of an aggregate program: a list (optionally joined per item), a filter, a reduction."""
    first = solution.steps[0]
    assert isinstance(first, CallStep)
    lister = profile.tools[first.tool]
    shown = {k: v for k, v in first.arguments.items() if k != "limit"}
    loop = solution.steps[1]
    assert isinstance(loop, ForEachStep)
    listed = singular(loop.source.path.rsplit(".", 1)[-1]) if loop.source.path else lister.entity
    entity = profile.tools[loop.tool].entity
    subject = f"all {listed}s" + (f" for {arguments_phrase(shown)}" if shown else "")
    subject += (
        "; look up each one's full record"
        if entity == listed
        else f"; for each of them, look up its {entity}"
    )
    final = solution.steps[-1]
    assert isinstance(final, AggregateStep)
    where = " and ".join(f"whose {_label(c.field)} {_OPS[c.op]} {_value(c.value)}" for c in final.where)
    among = f"the {entity}s" + (f" {where}" if where else "")
    field = _label(final.field or "")
    question = {
        "count": f"how many {among} are there",
        "sum": f"what is the total {field} of {among}",
        "mean": f"what is the average {field} of {among}",
        "min": f"what is the smallest {field} among {among}",
        "max": f"what is the largest {field} among {among}",
        "argmax": f"which of {among} has the largest {field} (give its {_label(final.key_field or 'id')})",
        "argmin": f"which of {among} has the smallest {field} (give its {_label(final.key_field or 'id')})",
    }[final.function]
    text = f'Consider {subject}: {question}? Reply with a JSON object with the key "{key}".'
    avoid = {listed, entity}
    return " ".join([text, *distractor_sentences(profile, avoid, knobs.distractors, rng)])


def leaks(request: str, answer: dict[str, Any], profile: EnvProfile, literals: set[str]) -> str | None:
    """Why a request is unacceptable (names a tool, quotes an answer value), or None."""
    lowered = request.lower()
    for name in profile.tools:
        if "_" in name and name.lower() in lowered:
            return "names a tool"
    for value in answer.values():
        for leaf in value if isinstance(value, list) else [value]:
            text = str(leaf).lower()
            if isinstance(leaf, bool) or leaf is None or text in literals:
                continue
            if (isinstance(leaf, str) and len(text) >= 4 and text in lowered) or (
                isinstance(leaf, int | float)
                and abs(leaf) >= 10
                and re.search(rf"(?<![\d.]){re.escape(text)}(?!\.?\d)", lowered)
            ):
                return "quotes the answer"
    return None


def literal_values(steps: list[Any]) -> set[str]:
    """Every literal argument value of a solution, lower-cased (the request must be allowed to name them)."""
    return {
        str(v).lower() for s in steps if isinstance(s, CallStep | ForEachStep) for v in s.arguments.values()
    }
