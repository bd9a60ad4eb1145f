"""Offline wording: deterministic templates that turn a chain or program into a request.

The request names no tool and quotes no answer value (``leaks`` checks both). Literal arguments are
always stated (otherwise the task would be unsolvable); values passed between steps are stated only
at levels without hidden references. Answer keys are named after entities and fields, and tied in words
to their call ("... when you X") wherever another call could be meant (``task_synth.clarity`` checks it).
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


_ASIDE = re.compile(r"\s*\([^()]*\)")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
_COMPARE = {"eq": "", "ne": "other than ", "gt": "above ", "ge": "of at least ", "lt": "below ",
            "le": "of at most ", "contains": "containing "}  # fmt: skip


def _label(name: str) -> str:
    return name.replace("_", " ").replace(".", " ")


def field_label(name: str, entity: str = "") -> str:
    """A field as a person names it: ``vet_name`` of a vet -> 'name', ``placed_on`` -> 'placed-on date',
    ``created_at`` -> 'created-at time', ``shipment.carrier`` -> 'shipment carrier'."""
    base = name.removeprefix(f"{entity}.").removeprefix(f"{entity}_") if entity else name
    if base.endswith("_on") and base != "_on":
        return _label(base[:-3]) + "-on date"
    if base.endswith("_at") and base != "_at":
        return _label(base[:-3]) + "-at time"
    return _label(base)


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


def is_noun(entity: str) -> bool:
    """Whether a tool's entity reads as a thing (``order``) rather than its verb (``prescribe``)."""
    return entity not in VERBS and f"{entity}s" not in VERBS


def purpose(tool: ToolProfile) -> str:
    """The first clause of a tool's description as an instruction: 'Cancel a booking; ...' -> 'cancel a
    booking'; a noun phrase ('Per-branch figures: ...') becomes 'look up per-branch figures'."""
    text = _ASIDE.sub("", " ".join(tool.description.split()))
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


def arguments_phrase(arguments: dict[str, Any], entity: str = "") -> str:
    """``{'email': 'a@b', 'active_only': False}`` -> "email 'a@b' and active only set to no"; fields of
    ``entity`` lose its name (a customer's ``customer_id`` is its 'id')."""
    parts = [
        f"{field_label(k, entity)} set to {'yes' if v else 'no'}"
        if isinstance(v, bool)
        else f"{field_label(k, entity)} {_value(v)}"
        for k, v in arguments.items()
    ]
    return " and ".join(parts)


def _with(literal: str) -> str:
    return f" for {literal}" if literal else ""


def step_actions(chain: Chain, profile: EnvProfile, knobs: Knobs) -> list[str]:
    """What each step asks for, in the words the request uses (the phrase an answer key is tied to)."""
    actions = []
    for index, step in enumerate(chain.steps):
        tool = profile.tools[step.tool]
        literal = arguments_phrase(step.arguments)
        if (
            knobs.hidden_references
            and index > 0
            and step.bindings
            and not (tool.mutates or tool.returns_list)
        ):
            source = _source_entity(chain, index, profile)
            if literal or not is_noun(tool.entity):
                actions.append(purpose(tool) + _with(literal))
            elif tool.entity == source:
                actions.append(f"look up the {_label(source)}'s full record")
            else:
                actions.append(f"find the {_label(source)}'s {_label(tool.entity)}")
        else:
            actions.append(purpose(tool) + _with(literal))
    return actions


def _step_sentence(chain: Chain, index: int, profile: EnvProfile, action: str) -> str:
    """One instruction per step (levels without hidden references): values passed along are stated."""
    step = chain.steps[index]
    if index == 0:
        return f"First, {action}."
    if not step.bindings:
        return f"Separately, {action}."
    source_entity = _source_entity(chain, index, profile)
    source = _label(source_entity)
    given = {k: resolve(r, chain.outputs) for k, r in step.bindings.items()}
    if (selector := chain.info[index].selector) is not None:
        field, value = selector
        sentence = f"Then, from those results take the {source} whose {field_label(field)} is {_value(value)}"
        shown = {k: v for k, v in given.items() if not (v == value and k.endswith(field))}
        if shown:
            sentence += f" (its {arguments_phrase(shown)})"
        return f"{sentence} and {action}."
    return f"Then, using the {source}'s {arguments_phrase(given, source_entity)}, {action}."


def _goal_sentence(chain: Chain, profile: EnvProfile, actions: list[str]) -> str:
    """Hidden references: the path from the named entities to the goal; no intermediate value is given
    and lookups along the way are not spelled out."""
    pieces = [actions[0]]
    for index in range(1, len(chain.steps)):
        step = chain.steps[index]
        if not step.bindings:
            pieces.append(f"separately {actions[index]}")
            continue
        hop = f"the {_label(_source_entity(chain, index, profile))}"
        if (selector := chain.info[index].selector) is not None:
            hop += f" whose {field_label(selector[0])} is {_value(selector[1])}"
        pieces.append(f"for {hop}, {actions[index]}")
    return "Your goal: " + "; then ".join(pieces) + "."


def answer_sentence(answer: dict[str, Ref], describe: dict[str, str]) -> str:
    if not answer:
        return "No written answer is needed: what counts is the change made to the records."
    keys = ", ".join(f'"{key}" ({describe[key]})' for key in answer)
    return f"Reply with a JSON object with the key{'s' if len(answer) > 1 else ''} {keys}."


def key_entity(path: str, tool_entity: str) -> str:
    """The entity an answer key describes: a list's items (``orders[*].id`` -> order) or the tool's."""
    if "[*]" in path:
        head = path.split("[", 1)[0]
        return singular(head.rsplit(".", 1)[-1]) if head else tool_entity
    return tool_entity


def tie_clause(actions: list[str], step: int) -> str:
    """Words tying a key to one call: 'when you X', or 'the second time you X' when the request asks
    for X more than once."""
    action = actions[step]
    repeats = [i for i, a in enumerate(actions) if a == action]
    if len(repeats) == 1:
        return f"when you {action}"
    return f"the {ORDINALS[repeats.index(step)]} time you {action}"


def rival_calls(step: int, entity: str, tools: list[str], entities: list[str]) -> list[int]:
    """Other calls a key about ``entity`` from call ``step`` could be read as coming from: calls of the
    same tool, or of a tool about the same entity."""
    return [i for i in range(len(tools)) if i != step and (tools[i] == tools[step] or entities[i] == entity)]


def describe_keys(
    answer: dict[str, Ref],
    chain_entities: list[str],
    actions: list[str] | None = None,
    tools: list[str] | None = None,
) -> dict[str, str]:
    """What each key means; tied to its call in words (``tie_clause``) whenever another call of the
    request returns the same kind of entity (``rival_calls``), or the entity is only a verb."""
    described = {}
    for key, ref in answer.items():
        entity = key_entity(ref.path, chain_entities[ref.step])
        rivals = rival_calls(ref.step, entity, tools or chain_entities, chain_entities)
        tie = rivals or not is_noun(entity)
        if "[*]" in ref.path:
            text = f"as a list, the ids of the {_label(entity)} records found"
            text += f" {tie_clause(actions, ref.step)}" if tie and actions else ""
        else:
            text = f"the {_label(entity)}'s " if is_noun(entity) else "the "
            text += field_label(ref.path, entity)
            text += f" returned {tie_clause(actions, ref.step)}" if tie and actions else ""
        described[key] = text
    return described


def _is_boolean(column: str, profile: EnvProfile) -> bool:
    return column.startswith(("is_", "has_")) or any(
        isinstance(v, bool) for v in profile.values.get(column, [])
    )


def _fact(entity: str, column: str, value: Any, profile: EnvProfile) -> str | None:
    """A true fact about the data in words (SQLite stores booleans as 0/1; they read as yes/no)."""
    noun = _label(entity)
    if _is_boolean(column, profile) and value in (0, 1):
        label = field_label(column).removeprefix("is ").removeprefix("has ")
        return f"{_article(noun)} {noun} on file is {'' if value else 'not '}{label}"
    if isinstance(value, int) and value in (0, 1):
        return None  # a flag or a count: without its type, not worth the risk of misreading
    return f"{_article(noun)} {noun} on file has {field_label(column, entity)} {_value(value)}"


def distractor_sentences(profile: EnvProfile, avoid: set[str], count: int, rng: random.Random) -> list[str]:
    facts = [f for f in profile.facts if f[0] not in avoid]
    rng.shuffle(facts)
    sentences = []
    for entity, column, value in facts:
        if len(sentences) >= count:
            break
        if (fact := _fact(entity, column, value, profile)) is not None:
            sentences.append(f"(Unrelated to this request: {fact}.)")
    return sentences


def chain_request(
    chain: Chain, answer: dict[str, Ref], profile: EnvProfile, knobs: Knobs, rng: random.Random
) -> str:
    entities = [profile.tools[s.tool].entity for s in chain.steps]
    actions = step_actions(chain, profile, knobs)
    if knobs.hidden_references:
        body = [_goal_sentence(chain, profile, actions)]
    else:
        body = [_step_sentence(chain, i, profile, actions[i]) for i in range(len(chain.steps))]
    body.append(answer_sentence(answer, describe_keys(answer, entities, actions, chain.tools)))
    body += distractor_sentences(profile, set(entities), knobs.distractors, rng)
    return " ".join(body)


def _condition(field: str, op: str, value: Any) -> str:
    return f"{field_label(field)} {_COMPARE[op]}{_value(value)}"


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
    listed_raw = singular(loop.source.path.rsplit(".", 1)[-1]) if loop.source.path else lister.entity
    entity_raw = profile.tools[loop.tool].entity
    listed, entity = _label(listed_raw), _label(entity_raw)
    subject = f"Take every {listed}" + (f" with {arguments_phrase(shown)}" if shown else "")
    subject += (
        " and look up each one's full record."
        if entity == listed
        else f" and, for each of them, look up its {entity}."
    )
    final = solution.steps[-1]
    assert isinstance(final, AggregateStep)
    conditions = " and ".join(_condition(c.field, c.op, c.value) for c in final.where)
    among = f"the {entity}s" + (f" that have {conditions}" if conditions else "")
    field = field_label(final.field or "", entity)
    key_field = field_label(final.key_field or "id", entity)
    question = {
        "count": f"How many {entity}s have {conditions}" if conditions else f"How many {entity}s are there",
        "sum": f"What is the total {field} of {among}",
        "mean": f"What is the average {field} of {among}",
        "min": f"What is the smallest {field} among {among}",
        "max": f"What is the largest {field} among {among}",
        "argmax": f"Which of {among} has the largest {field} (give its {key_field})",
        "argmin": f"Which of {among} has the smallest {field} (give its {key_field})",
    }[final.function]
    text = f'{subject} {question}? Reply with a JSON object with the key "{key}".'
    avoid = {listed_raw, entity_raw}
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
