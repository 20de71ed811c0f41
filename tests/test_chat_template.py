"""Chat templates: the named formats' exact text, llama-cpp-python's formatters
where they keep every message, GGUF templates (Gemma 3's own), the merged retry
for templates without a system role, and the messages' validation. No models."""

from __future__ import annotations

import copy
from datetime import datetime

import pytest

from specllama.chat_template import (
    Rendered,
    chat_format_names,
    chat_template_for,
    check_chat_format,
    normalize_messages,
)

SYSTEM = {"role": "system", "content": "You are terse."}
CONVERSATION = [
    SYSTEM,
    {"role": "user", "content": "Hi there."},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Name a colour."},
]

# [system, user, assistant, user] in each named format, and its stop strings.
EXPECTED = {
    "chatml": (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi there.<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nName a colour.<|im_end|>\n"
        "<|im_start|>assistant\n",
        ["<|im_end|>"],
    ),
    "gemma": (
        "<start_of_turn>user\nYou are terse.\n\nHi there.<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\n",
        ["<end_of_turn>"],
    ),
    "llama-2": (
        "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there. [/INST] Hello! </s>"
        "<s>[INST] Name a colour. [/INST]",
        ["</s>"],
    ),
    "llama-3": (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ["<|eot_id|>"],
    ),
    "mistral-instruct": (
        "[INST] You are terse.\n\nHi there. [/INST]Hello!</s>[INST] Name a colour. [/INST]",
        ["</s>"],
    ),
    "phi-3": (
        "<|system|>\nYou are terse.<|end|>\n"
        "<|user|>\nHi there.<|end|>\n"
        "<|assistant|>\nHello!<|end|>\n"
        "<|user|>\nName a colour.<|end|>\n"
        "<|assistant|>\n",
        ["<|end|>"],
    ),
    "zephyr": (
        "<|system|>\nYou are terse.</s>\n"
        "<|user|>\nHi there.</s>\n"
        "<|assistant|>\nHello!</s>\n"
        "<|user|>\nName a colour.</s>\n"
        "<|assistant|>\n",
        ["</s>"],
    ),
}

# google/gemma-3-*-it, tokenizer_config.json "chat_template" (the text-and-image
# template; a GGUF converted from it carries it as tokenizer.chat_template).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)

# google/gemma-2-2b-it, tokenizer_config.json: refuses the system role.
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

# mistralai/Mistral-7B-Instruct-v0.1, tokenizer_config.json: refuses the system role.
MISTRAL_V01_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

# What llama-cpp-python's own "gemma" format does with a system message: nothing.
DROPS_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] != 'system' %}"
    "{{ '<' + m['role'] + '>' + m['content'] + '</' + m['role'] + '>' }}{% endif %}{% endfor %}"
)
# Renders the user's messages only.
USER_ONLY_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] + '\n' }}{% endif %}{% endfor %}"
)
EXPECTED["hermes"] = EXPECTED["chatml"]  # without tools, hermes is ChatML


def gguf(template: str, *, bos: str = "<bos>", eos: str = "<eos>"):
    return chat_template_for({"tokenizer.chat_template": template, "general.architecture": "gemma3"},
                             bos_token=bos, eos_token=eos)


def named(name: str):
    return chat_template_for({}, bos_token="<s>", eos_token="</s>", chat_format=name)


# ------------------------------------------------------------------ named formats


def test_the_named_formats():
    assert chat_format_names() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_format_exact_text(name):
    text, stop = EXPECTED[name]
    template = named(name)
    assert (template.name, template.origin) == (name, f"chat format {name!r}")
    # none writes the BOS: the caller adds it when tokenizing
    assert template.render(CONVERSATION) == Rendered(text, stop, False)


def test_named_format_without_generation_prompt():
    assert named("chatml").render(CONVERSATION[:3], add_generation_prompt=False).text == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi there.<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
    )


def test_system_message_later_in_a_format_without_a_system_role_is_merged():
    """Gemma folds only a first system message; a later one goes through the
    merged retry into the first user message."""
    messages = [CONVERSATION[1], CONVERSATION[2], {"role": "developer", "content": "Be kind."}, CONVERSATION[3]]
    assert named("gemma").render(messages).text == (
        "<start_of_turn>user\nBe kind.\n\nHi there.<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_only_a_system_message_becomes_a_user_turn():
    assert named("gemma").render([SYSTEM]).text == (
        "<start_of_turn>user\nYou are terse.<end_of_turn>\n<start_of_turn>model\n"
    )


# ------------------------------------------------------------------ llama-cpp-python's formatters


def their_formatter(name: str):
    """llama-cpp-python's formatter of that name, from its handler registry (a
    registered format is wrapped in a handler that closes over it)."""
    from llama_cpp import llama_chat_format as lcf

    handler = lcf.get_chat_completion_handler(name)
    cells = dict(zip(handler.__code__.co_freevars, (c.cell_contents for c in handler.__closure__)))
    return cells["chat_formatter"]


@pytest.mark.parametrize("name, with_system", [
    ("gemma", False),
    ("llama-3", False),
    ("llama-3", True),
    ("mistral-instruct", False),
    ("chatml", True),
])
def test_same_text_as_llama_cpp_python(name, with_system):
    messages = CONVERSATION if with_system else CONVERSATION[1:]
    theirs = their_formatter(name)(messages=messages)
    ours = named(name).render(messages)
    assert ours.text == theirs.prompt
    assert theirs.added_special is False  # they tokenize it with add_bos=True, as our has_bos=False asks
    # the same stop string; for gemma without their "\n" (the turn may end with EOS instead)
    assert ours.stop == [theirs.stop.rstrip("\n")]


def test_where_llama_cpp_python_differs():
    """Why the others are not compared: without a system message, its chatml and
    zephyr write an empty system turn; its zephyr doubles the newline after each
    role, its llama-2 misses spaces (the models' own templates do neither)."""
    no_system = CONVERSATION[1:]
    assert their_formatter("chatml")(messages=no_system).prompt.startswith("<|im_start|>system\n<|im_end|>\n")
    assert named("chatml").render(no_system).text.startswith("<|im_start|>user\n")
    assert their_formatter("zephyr")(messages=no_system).prompt == (
        "<|system|>\n</s>\n<|user|>\n\nHi there.</s>\n<|assistant|>\n\nHello!</s>\n"
        "<|user|>\n\nName a colour.</s>\n<|assistant|>\n\n"
    )
    assert their_formatter("llama-2")(messages=no_system).prompt == (
        " <s>[INST]Hi there.  [/INST]Hello! </s><s>[INST]Name a colour.  [/INST]"
    )


@pytest.mark.parametrize("name", ["gemma", "mistral-instruct"])
def test_llama_cpp_python_drops_the_system_message_ours_keeps_it(name):
    theirs = their_formatter(name)(messages=CONVERSATION)
    assert "You are terse." not in theirs.prompt
    assert theirs.prompt == their_formatter(name)(messages=CONVERSATION[1:]).prompt
    assert "You are terse.\n\nHi there." in named(name).render(CONVERSATION).text


# ------------------------------------------------------------------ GGUF templates


def test_gemma3_template_folds_the_system_prompt_into_the_first_user_turn():
    template = gguf(GEMMA3_TEMPLATE)
    assert (template.name, template.origin) == ("model", "the model's chat template")
    assert template.render(CONVERSATION) == Rendered(
        "<bos><start_of_turn>user\nYou are terse.\n\nHi there.<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\n",
        ["<eos>"],
        True,
    )


def test_gemma3_template_equals_the_gemma_format_after_the_bos():
    for messages in (CONVERSATION, CONVERSATION[1:]):
        assert gguf(GEMMA3_TEMPLATE).render(messages).text == "<bos>" + named("gemma").render(messages).text


def test_gemma3_template_refusal_is_one_line():
    with pytest.raises(ValueError) as e:
        gguf(GEMMA3_TEMPLATE).render([CONVERSATION[1], CONVERSATION[3]])
    assert str(e.value) == (
        "the model's chat template refused the messages: "
        "Conversation roles must alternate user/assistant/user/assistant/..."
    )


def test_template_that_refuses_the_system_role_gets_it_merged():
    # alone, it becomes a user turn
    assert gguf(GEMMA2_TEMPLATE).render([SYSTEM]).text == (
        "<bos><start_of_turn>user\nYou are terse.<end_of_turn>\n<start_of_turn>model\n"
    )
    rendered = gguf(GEMMA2_TEMPLATE).render(CONVERSATION)
    assert rendered == Rendered(
        "<bos><start_of_turn>user\nYou are terse.\n\nHi there.<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\n",
        ["<eos>"],
        True,
    )
    rendered = gguf(MISTRAL_V01_TEMPLATE, bos="<s>", eos="</s>").render(CONVERSATION)
    assert rendered == Rendered(
        "<s>[INST] You are terse.\n\nHi there. [/INST]Hello!</s> [INST] Name a colour. [/INST]", ["</s>"], True
    )


def test_template_that_drops_the_system_message_gets_it_merged():
    assert gguf(DROPS_SYSTEM_TEMPLATE).render(CONVERSATION[:2]) == Rendered(
        "<user>You are terse.\n\nHi there.</user>", ["<eos>"], False
    )


def test_template_that_ignores_a_message():
    with pytest.raises(ValueError) as e:
        gguf(USER_ONLY_TEMPLATE).render(CONVERSATION[1:])
    assert str(e.value) == (
        "the model's chat template leaves out the text of messages[1] (role 'assistant'); "
        "--chat-format picks another format"
    )
    with pytest.raises(ValueError) as e:  # with a system message: merged, and still the reply is left out
        gguf(USER_ONLY_TEMPLATE).render(CONVERSATION)
    assert str(e.value) == (
        "the model's chat template leaves out the text of messages[2] (role 'assistant') "
        "(also with the system text merged into the first user message); --chat-format picks another format"
    )


def test_template_that_refuses_even_merged():
    with pytest.raises(ValueError) as e:
        gguf(MISTRAL_V01_TEMPLATE).render([SYSTEM, CONVERSATION[1], CONVERSATION[3]])
    assert str(e.value) == (
        "the model's chat template refused the messages: "
        "Conversation roles must alternate user/assistant/user/assistant/... "
        "(also with the system text merged into the first user message)"
    )


def test_empty_and_blank_contents_are_not_missing():
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "  "}, CONVERSATION[2]]
    assert gguf(USER_ONLY_TEMPLATE).render(messages[:2]).text == "  \n"
    with pytest.raises(ValueError, match=r"messages\[2\] \(role 'assistant'\)"):
        gguf(USER_ONLY_TEMPLATE).render(messages)


def test_reasoning_dropped_from_earlier_replies_is_not_missing():
    """Qwen3's and DeepSeek-R1's templates keep only what follows </think>."""
    template = gguf("{% for m in messages %}{{ m['content'].split('</think>')[-1] | trim }}|{% endfor %}")
    messages = [CONVERSATION[1], {"role": "assistant", "content": "<think>hmm</think>\n\nHello!"}, CONVERSATION[3]]
    assert template.render(messages).text == "Hi there.|Hello!|Name a colour.|"


def test_template_errors_are_one_line_value_errors():
    with pytest.raises(ValueError) as e:
        gguf("{% for m in messages %}")
    assert str(e.value) == (
        "the model's chat template does not compile: Unexpected end of template. Jinja was looking for the "
        "following tags: 'endfor' or 'else'. The innermost block that needs to be closed is 'for'. (line 1); "
        "--chat-format picks a named format"
    )
    cases = {
        "{{ foo.bar }}": "UndefinedError: 'foo' is undefined",
        "{{ ''.__class__.__mro__ }}": "SecurityError: access to attribute '__class__' of 'str' object is unsafe.",
        "{{ raise_exception('no\n   way') }}": None,
    }
    for source, reason in cases.items():
        with pytest.raises(ValueError) as e:
            gguf(source).render(CONVERSATION[1:2])
        if reason is None:
            assert str(e.value) == "the model's chat template refused the messages: no way"
        else:
            assert str(e.value) == f"the model's chat template failed: {reason}"


def test_template_globals_filters_and_tags():
    source = (
        "{{ messages | tojson }}|{{ strftime_now('%Y') }}|{% if tools is not none %}tools{% endif %}"
        "{% generation %}{{ add_generation_prompt }}{% endgeneration %}|"
        "{% for m in messages %}{{ m['role'] }}{% break %}{% endfor %}|{{ bos_token }}{{ eos_token }}"
    )
    year = datetime.now().strftime("%Y")
    text = gguf(source, bos="", eos="").render([{"role": "user", "content": "café"}]).text
    assert text == '[{"role": "user", "content": "café"}]|' + year + "|True|user|"


def test_gguf_template_stop_is_the_eos_text_and_bos_is_detected():
    assert gguf("{{ messages[0]['content'] }}", eos="").render(CONVERSATION[1:2]) == Rendered("Hi there.", [], False)
    assert gguf("{{ bos_token }}x{{ messages[0]['content'] }}", bos="").render(CONVERSATION[1:2]).has_bos is False


# ------------------------------------------------------------------ choosing the template


@pytest.mark.parametrize("architecture, bos, name", [
    ("gemma3", "<bos>", "gemma"),
    ("gemma2", "<bos>", "gemma"),
    ("gemma", "<bos>", "gemma"),
    ("qwen2", "", "chatml"),
    ("qwen3", "", "chatml"),
    ("phi3", "<s>", "phi-3"),
    ("llama", "<|begin_of_text|>", "llama-3"),
    ("llama", "<s>", "llama-2"),
    ("gpt2", "<|endoftext|>", "chatml"),
    (None, "", "chatml"),
])
def test_format_by_architecture_when_the_gguf_has_no_template(architecture, bos, name):
    metadata = {"general.architecture": architecture} if architecture else {}
    template = chat_template_for(metadata, bos_token=bos, eos_token="</s>")
    assert template.name == name
    assert template.origin == f"no chat template in the model; using {name!r} (--chat-format to change)"


def test_named_format_overrides_the_gguf_template():
    template = chat_template_for({"tokenizer.chat_template": GEMMA3_TEMPLATE}, bos_token="<bos>", eos_token="<eos>",
                                 chat_format="zephyr")
    assert (template.name, template.origin) == ("zephyr", "chat format 'zephyr'")
    assert template.render(CONVERSATION).text == EXPECTED["zephyr"][0]


def test_an_empty_gguf_template_counts_as_none():
    assert chat_template_for({"tokenizer.chat_template": "", "general.architecture": "gemma3"},
                             bos_token="<bos>", eos_token="<eos>").name == "gemma"


def test_unknown_chat_format():
    check_chat_format(None)
    check_chat_format("gemma")
    message = ("unknown chat format 'nope'; known: chatml, gemma, hermes, llama-2, llama-3, mistral-instruct, phi-3, "
               "zephyr")
    with pytest.raises(ValueError) as e:
        check_chat_format("nope")
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:
        chat_template_for({}, bos_token="", eos_token="", chat_format="nope")
    assert str(e.value) == message


# ------------------------------------------------------------------ messages


def test_normalize_joins_text_parts_maps_developer_and_leaves_the_input_alone():
    messages = [
        {"role": "developer", "content": "Be terse."},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], "name": "a"},
        {"role": "assistant", "content": []},
    ]
    before = copy.deepcopy(messages)
    assert normalize_messages(tuple(messages)) == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "one\ntwo"},
        {"role": "assistant", "content": ""},
    ]
    assert messages == before


def test_content_parts_reach_the_template():
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there."}]}]
    assert named("gemma").render(messages).text == (
        "<start_of_turn>user\nHi\nthere.<end_of_turn>\n<start_of_turn>model\n"
    )


SHAPE = "messages must be a non-empty list of {'role': ..., 'content': ...} dicts, got "


@pytest.mark.parametrize("messages, message", [
    ("hello", SHAPE + "'hello'"),
    ([], SHAPE + "[]"),
    (None, SHAPE + "None"),
    ({"role": "user", "content": "hi"}, SHAPE + "{'role': 'user', 'content': 'hi'}"),
    ([{"role": "user", "content": "hi"}, "hi"], SHAPE + "messages[1] = 'hi'"),
    ([{"role": "wizard", "content": "hi"}],
     "messages[0] has role 'wizard'; accepted roles: system, developer (as system), user, assistant, tool"),
    ([{"content": "hi"}],
     "messages[0] has role None; accepted roles: system, developer (as system), user, assistant, tool"),
    ([{"role": "tool", "content": "42"}],
     "messages[0] (role 'tool') has tool_call_id None, which answers no earlier assistant tool call (their ids: "
     "none)"),
    ([SYSTEM, {"role": "user", "content": None}],
     "messages[1] has no 'content' (a string, or a list of text parts, is needed)"),
    ([SYSTEM, {"role": "user"}],
     "messages[1] has no 'content' (a string, or a list of text parts, is needed)"),
    ([{"role": "user", "content": 5}],
     "messages[0] has content 5: a string, or a list of text parts, is needed"),
    ([{"role": "user", "content": [{"type": "text", "text": "look"},
                                   {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}],
     "messages[0] has a content part of type 'image_url': only text parts ({'type': 'text', 'text': ...}) "
     "are supported"),
    ([{"role": "user", "content": ["look"]}],
     "messages[0] has a content part of type 'str': only text parts ({'type': 'text', 'text': ...}) are supported"),
    ([{"role": "user", "content": [{"type": "text", "text": None}]}],
     "messages[0] content part 0 is a text part without a string 'text': {'type': 'text', 'text': None}"),
])
def test_normalize_refuses(messages, message):
    with pytest.raises(ValueError) as e:
        normalize_messages(messages)
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:  # render validates the same way
        named("chatml").render(messages)
    assert str(e.value) == message


def test_long_values_are_shortened_in_errors():
    with pytest.raises(ValueError) as e:
        normalize_messages("x" * 100)
    assert str(e.value) == SHAPE + "'" + "x" * 56 + "..."


def test_hermes_renders_tools_calls_and_results():
    tools = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "w", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "a", "content": "sunny"}]
    template = named("hermes")
    assert template.renders_tools() and not named("chatml").renders_tools()
    assert template.render(messages, tools=tools).text == (
        "<|im_start|>system\nYou may call one or more functions. Their signatures are within <tools></tools>, one "
        "JSON object per line:\n<tools>\n"
        '{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}\n</tools>\n'
        "To call a function, write a JSON object with its name and arguments within <tool_call></tool_call> tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "w", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
