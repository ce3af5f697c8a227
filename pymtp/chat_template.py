"""Render a conversation with a model's Jinja chat template (``tokenizer.chat_template``).

The environment mirrors what Hugging Face ``apply_chat_template`` gives a
template: a sandboxed, immutable Jinja environment with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension, a non-HTML-escaping
``tojson`` filter, and the ``raise_exception`` / ``strftime_now`` globals.
Models without a template get ChatML.
"""

from __future__ import annotations

import datetime
import functools
import json

from pymtp.errors import PymtpError

# Used when the GGUF has no tokenizer.chat_template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Where ChatML stands in for a model's own template, nothing in the vocabulary ends a turn: a base model
# (Gemma 3 270M) writes "<|im_end|>" as plain text and goes on with the next turns itself. A reply
# stops at these.
CHATML_STOPS = ("<|im_end|>", "<|im_start|>")


def with_chat_stops(template: str | None, stop: list[str] | str | None = None) -> list[str] | None:
    """``stop`` (a request's stop strings) plus what a reply rendered with ``template`` needs: ChatML's
    turn markers where the model has no template (ChatML is used), nothing where it has its own (its
    end-of-turn token ends the reply)."""
    given = [stop] if isinstance(stop, str) else list(stop or [])
    extra = [] if template else [s for s in CHATML_STOPS if s not in given]
    return given + extra or None


class ChatTemplateError(PymtpError):
    """The model's chat template failed to compile or raised while rendering."""


def _raise_exception(message):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's built-in tojson HTML-escapes '<', '>', '&', "'"; chat templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=8)
def _compile(template: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def render_chat(template: str | None, messages: list[dict], add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", **template_vars) -> str:
    """Render ``messages`` ([{"role": ..., "content": ...}, ...]) to the prompt text.

    ``template`` None or empty -> ChatML. Extra keyword arguments (``tools``,
    ``enable_thinking``, ...) are passed to the template as variables.
    Raises ChatTemplateError (a PymtpError) when the template is broken or
    rejects the conversation (e.g. via ``raise_exception``).
    """
    from jinja2.exceptions import TemplateError

    source = template if template else CHATML_TEMPLATE
    try:
        compiled = _compile(source)
        return compiled.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **template_vars,
        )
    except (TemplateError, TypeError) as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
