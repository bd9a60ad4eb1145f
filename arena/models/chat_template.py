"""A ChatML chat template for tool use that renders compactly and incrementally.

Compact: the tool list is most of a prompt's tokens, so each tool is one line, ``name(required, optional?):
first sentence of its description``; each tool result is cut to its first ``tool_result_chars`` characters
(with ``…`` where cut): a render variable (``apply_chat_template(..., tool_result_chars=N)``, the policies'
``tool_result_chars`` setting) whose default is fixed in the template when it is made. Incremental: every
message ends with ``<|im_end|>`` and the newline that separates messages opens the next one, so a conversation
renders as an exact prefix of its sequel and a generated turn ends with the end-of-sequence token (what
``arena.policies.hf`` requires). The system message (with the tool list) renders alone as a prefix too: the
policy caches its keys and values once per environment.

An assistant turn is its content, then one Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
per call, parsed back by ``arena.policies.toolcall_parsing``.
"""

from __future__ import annotations

import json

CALL_HINT = 'Call a tool with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.'

_TEMPLATE = (
    "{%- set cut = tool_result_chars | default(TOOL_CHARS) -%}"
    "{%- macro tool_lines(tools) -%}"
    "{%- for tool in tools -%}{%- set f = tool.function if tool.function is defined else tool -%}"
    "{%- set params = f.parameters if f.parameters is defined else {} -%}"
    "{%- set props = params.properties if params.properties is defined else {} -%}"
    "{%- set required = params.required if params.required is defined else [] -%}"
    "{{ '\\n' }}{{ f.name }}("
    "{%- for name in props -%}{{ name }}{{ '' if name in required else '?' }}"
    "{{ '' if loop.last else ', ' }}{%- endfor -%})"
    "{%- set about = (f.description or '').split('. ')[0].split(': ')[0] -%}"
    "{%- if about %}: {{ about[:DESCRIPTION_CHARS] }}{% endif -%}"
    "{%- endfor -%}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(opened=false) -%}"
    "{%- macro open(role) -%}"
    "{{ '\\n' if ns.opened else '' }}<|im_start|>{{ role }}{{ '\\n' }}"
    "{%- endmacro -%}"
    "{%- set rest = messages -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{ open('system') }}{%- set ns.opened = true -%}{{ messages[0].content }}"
    "{%- if tools %}{{ '\\n' }}CALL_HINT{{ '\\n' }}Tools:{{ tool_lines(tools) }}{% endif %}<|im_end|>"
    "{%- set rest = messages[1:] -%}"
    "{%- elif tools -%}{{ open('system') }}{%- set ns.opened = true -%}"
    "CALL_HINT{{ '\\n' }}Tools:{{ tool_lines(tools) }}<|im_end|>"
    "{%- endif -%}"
    "{%- for m in rest -%}"
    "{{ open(m.role) }}{%- set ns.opened = true -%}"
    "{%- if m.role == 'assistant' -%}{{ m.content or '' }}"
    "{%- for call in m.tool_calls or [] -%}"
    "{%- set f = call.function if call.function is defined else call -%}"
    '<tool_call>{"name": "{{ f.name }}", "arguments": '
    "{{ f.arguments if f.arguments is string else f.arguments | tojson }}}</tool_call>"
    "{%- endfor -%}"
    "{%- else -%}{%- set text = m.content if m.content is string else m.content | tojson -%}"
    "{%- if m.role == 'tool' and text | length > cut -%}{{ text[:cut] }}…"
    "{%- else -%}{{ text }}{%- endif -%}"
    "{%- endif -%}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ open('assistant') }}{%- endif -%}"
)


TOOL_RESULT_CHARS = 1000
"""The default cut of a tool result: with 400, a third of the synthesized reference conversations had their
answer past the cut (docs/evolve.md); with 1,000, about one in ten."""


def chatml_tools_template(tool_result_chars: int = TOOL_RESULT_CHARS, description_chars: int = 60) -> str:
    """The template, showing the first ``tool_result_chars`` characters of each tool result (unless the
    render variable of that name says otherwise) and the first ``description_chars`` characters of each
    tool's description."""
    return (
        _TEMPLATE.replace("TOOL_CHARS", str(tool_result_chars))
        .replace("DESCRIPTION_CHARS", str(description_chars))
        .replace("CALL_HINT", "{{ " + json.dumps(CALL_HINT) + " }}")
    )
