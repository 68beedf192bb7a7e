#!/usr/bin/env python3
"""Renders chat templates the way Hugging Face transformers' apply_chat_template(tokenize=False)
does, with Python's jinja2, as the reference the C++ interpreter is compared against.

Usage: jinja_reference.py TEMPLATE.jinja... -- CONVERSATION.json...
Prints one JSON object per line for every template x conversation x add_generation_prompt:
{"template", "conversation", "add_generation_prompt", "ok", "text" | "error" and "error_type"}
(error_type "TemplateError" is the template's own raise_exception).

A conversation file holds {"messages": [...], "tools": [...]?, "documents": [...]?,
"variables": {...}?}. Tool-call arguments arrive as JSON strings (OpenAI's wire form); they are
handed to the template as objects, and as the original strings when the template fails on
objects (as vLLM does). strftime_now is pinned to 2024-07-26 12:00:00 for reproducible output.
"""
import copy
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

PINNED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
BOS = "<s>"
EOS = "</s>"


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return PINNED_NOW.strftime(format)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment


def with_parsed_arguments(messages):
    converted = copy.deepcopy(messages)
    changed = False
    for message in converted:
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    parsed = json.loads(arguments)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    function["arguments"] = parsed
                    changed = True
    return converted, changed


def render(template, conversation, add_generation_prompt):
    variables = dict(conversation.get("variables", {}))
    variables.setdefault("bos_token", BOS)
    variables.setdefault("eos_token", EOS)
    as_objects, changed = with_parsed_arguments(conversation["messages"])
    attempts = [as_objects, conversation["messages"]] if changed else [as_objects]
    error = None
    for messages in attempts:
        try:
            return True, template.render(messages=messages, tools=conversation.get("tools"),
                                         documents=conversation.get("documents"),
                                         add_generation_prompt=add_generation_prompt,
                                         **variables), None
        except Exception as exception:  # every failure is reported, as chatflow reports it
            error = exception
    return False, str(error), type(error).__name__


def main(arguments):
    split = arguments.index("--")
    templates, conversations = arguments[:split], arguments[split + 1:]
    environment = make_environment()
    for template_path in templates:
        with open(template_path, encoding="utf-8") as file:
            source = file.read()
        try:
            template = environment.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            for conversation_path in conversations:
                for add in (False, True):
                    print(json.dumps({"template": template_path, "conversation": conversation_path,
                                      "add_generation_prompt": add, "ok": False,
                                      "error": "syntax: " + str(error),
                                      "error_type": "TemplateSyntaxError"}))
            continue
        for conversation_path in conversations:
            with open(conversation_path, encoding="utf-8") as file:
                conversation = json.load(file)
            for add in (False, True):
                ok, text, error_type = render(template, conversation, add)
                result = {"template": template_path, "conversation": conversation_path,
                          "add_generation_prompt": add, "ok": ok, "text" if ok else "error": text}
                if not ok:
                    result["error_type"] = error_type
                print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
