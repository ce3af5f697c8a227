"""pymtp.chat_template.render_chat with real-world template styles."""

import datetime

import pytest

from pymtp.chat_template import ChatTemplateError, render_chat
from pymtp.errors import PymtpError

# tokenizer.chat_template of SmolLM2-135M-Instruct (the built-in default model).
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

# tokenizer.chat_template of Meta-Llama-3-8B-Instruct.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

USER_HI = [{"role": "user", "content": "Hi"}]


def test_smollm2_adds_default_system_prompt():
    assert render_chat(SMOLLM2_TEMPLATE, USER_HI) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_multi_turn_with_system():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    assert render_chat(SMOLLM2_TEMPLATE, messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("template", [None, ""])
def test_chatml_fallback_without_template(template):
    assert render_chat(template, USER_HI) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_stops_only_where_chatml_stands_in():
    from pymtp.chat_template import with_chat_stops

    assert with_chat_stops(None) == ["<|im_end|>", "<|im_start|>"]
    assert with_chat_stops("", "END") == ["END", "<|im_end|>", "<|im_start|>"]
    assert with_chat_stops(None, ["<|im_end|>"]) == ["<|im_end|>", "<|im_start|>"]  # no repeats
    assert with_chat_stops(SMOLLM2_TEMPLATE) is None
    assert with_chat_stops(SMOLLM2_TEMPLATE, ["x"]) == ["x"]


def test_no_generation_prompt():
    assert render_chat(None, USER_HI, add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"


def test_llama3_uses_bos_token_and_trims_content():
    out = render_chat(LLAMA3_TEMPLATE, [{"role": "user", "content": "  Hi \n"}],
                      bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    assert out == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_trim_and_lstrip_blocks_like_hugging_face():
    template = (
        "{% for m in messages %}\n"
        "    {% if m['role'] == 'user' %}\n"
        "[{{ m['content'] }}]\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
    )
    assert render_chat(template, USER_HI + USER_HI) == "[Hi]\n[Hi]\n"


def test_raise_exception_becomes_a_pymtp_error():
    template = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('need a system turn') }}{% endif %}"
    with pytest.raises(ChatTemplateError, match="need a system turn") as excinfo:
        render_chat(template, USER_HI)
    assert isinstance(excinfo.value, PymtpError)


def test_strftime_now_and_loop_controls():
    template = "{{ strftime_now('%Y') }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}" \
               "{{ m['content'] }}{% endfor %}"
    out = render_chat(template, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert out == f"{datetime.datetime.now().year}a"


def test_tojson_is_not_html_escaped():
    out = render_chat("{{ tools | tojson }}", USER_HI, tools=[{"name": "a<b>&'c"}])
    assert out == '[{"name": "a<b>&\'c"}]'


def test_sandbox_is_immutable():
    with pytest.raises(ChatTemplateError):
        render_chat("{% set _ = messages.append({'role': 'x'}) %}", USER_HI)


def test_syntax_error_is_reported():
    with pytest.raises(ChatTemplateError, match="chat template error"):
        render_chat("{% for m in messages %}", USER_HI)


def test_none_content_is_a_template_error_not_a_crash():
    with pytest.raises(ChatTemplateError):
        render_chat(None, [{"role": "user", "content": None}])
