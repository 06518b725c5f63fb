#!/usr/bin/python3
"""Renders conversations with the chat_template of tokenizer_config.json files through Python's Jinja
(jinja2, Debian's python3-jinja2) set up as transformers' apply_chat_template sets it up: a sandboxed
environment with trim_blocks and lstrip_blocks, the loopcontrols extension, tojson as json.dumps with
non-ASCII kept, raise_exception; messages, tools (None when the row has none), the special tokens and
add_generation_prompt in the context. The chat-template tests' reference for what transformers renders
(tests/data/chat_test.cpp); @huggingface/jinja (js/chat_templates.mjs) is the second one.

  /usr/bin/python3 tools/reference/chat_templates.py CASES.json > renders.json

CASES.json: {"configs": {name: tokenizer_config.json path}, "conversations": [[{role, content}...] |
{"messages": [...], "tools": [...]}, ...], "template_kwargs": {...} (optional: more context for every
render, such as {"enable_thinking": false})}. Output: {name: [{"plain": text, "generation": text} |
{"error": message}, ...]} in conversation order; "generation" rendered with add_generation_prompt.
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def token(t):
    return (t.get("content") if isinstance(t, dict) else t) or ""


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    out = {}
    for name, path in cases["configs"].items():
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        template = env.from_string(cfg["chat_template"])
        renders = []
        for conversation in cases["conversations"]:
            if isinstance(conversation, list):
                messages, tools = conversation, None
            else:
                messages, tools = conversation["messages"], conversation.get("tools")

            def render(add_generation_prompt):
                return template.render(messages=messages, tools=tools, bos_token=token(cfg.get("bos_token")),
                                       eos_token=token(cfg.get("eos_token")),
                                       add_generation_prompt=add_generation_prompt,
                                       **cases.get("template_kwargs", {}))

            try:
                renders.append({"plain": render(False), "generation": render(True)})
            except Exception as e:  # a template's raise_exception, or a Jinja error: the case's answer
                renders.append({"error": str(e)})
        out[name] = renders
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
