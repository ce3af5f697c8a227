"""`pymtp chat`: an interactive multi-turn conversation in the terminal."""

from __future__ import annotations

import argparse
import sys

from pymtp.chat_template import with_chat_stops
from pymtp.cli import common
from pymtp.errors import ContextOverflowError, PymtpError

DESCRIPTION = """\
Chat with a model in the terminal. Each reply is streamed as it is generated,
followed by a dim statistics line (speed, MTP draft acceptance).

The whole conversation is re-rendered with the model's chat template every
turn; the engine reuses the KV cache for the common prefix, so only the new
turn is processed. Uses MTP speculative decoding when the model has MTP layers.

commands at the > prompt:
  /reset   forget the conversation (keeps --system)
  /exit    quit (also Ctrl-D, or Ctrl-C at the prompt)
  /help    show these commands
Ctrl-C while a reply is streaming stops that reply (the partial reply is kept).

Input that is not a terminal is read line by line, one user turn per line."""

EPILOG = """\
examples:
  pymtp chat
  pymtp chat model.gguf --system "You are a terse assistant." --temp 0.7
  pymtp chat model.gguf --n-draft 4 --ngl -1
  printf 'Hi!\\nWhat is 2+2?\\n' | pymtp chat model.gguf"""

COMMANDS_HELP = "commands: /reset (forget the conversation), /exit (quit), /help"


def register(subparsers) -> None:
    p = subparsers.add_parser("chat", help="chat with a model interactively",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("--system", metavar="TEXT", default=None, help="system prompt for the conversation")
    common.add_sampling_args(p, default_n=512)
    common.add_engine_args(p)
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def read_user_line(interactive: bool) -> str | None:
    """Next user line, or None at end of input. Raises KeyboardInterrupt on Ctrl-C."""
    if interactive:
        try:
            return input("> ")
        except EOFError:
            print()
            return None
    line = sys.stdin.readline()
    return None if line == "" else line.rstrip("\n")


class Conversation:
    """The message history, optionally starting with a system message."""

    def __init__(self, system: str | None):
        self.system = system
        self.messages: list[dict] = []
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def with_user(self, text: str) -> list[dict]:
        return self.messages + [{"role": "user", "content": text}]

    def commit(self, user_text: str, reply: str) -> None:
        self.messages = self.with_user(user_text) + [{"role": "assistant", "content": reply}]


def reply_to(model, conversation: Conversation, user_text: str, kwargs: dict) -> None:
    """Generate and stream one reply, then record the turn. Ctrl-C cancels the reply."""
    tokens = model.chat_tokens(conversation.with_user(user_text))
    kwargs = dict(kwargs, stop=with_chat_stops(model.chat_template(), kwargs.get("stop")))
    stream = model.generate(tokens, stream=True, **kwargs)
    try:
        for delta in stream:
            sys.stdout.write(delta)
            sys.stdout.flush()
    except KeyboardInterrupt:
        stream.cancel()
    completion = stream.result
    conversation.commit(user_text, completion.text)
    if not completion.text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    note = " [cancelled]" if completion.finish_reason == "cancelled" else ""
    if completion.finish_reason == "context":
        note = " [context full: /reset to start over]"
    print(common.dim(completion.stats.summary_line() + note, sys.stderr), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    common.validate_args(args)
    interactive = sys.stdin.isatty()
    conversation = Conversation(args.system)
    kwargs = common.sampling_kwargs(args)
    with common.load_model(args) as model:
        if interactive:
            print(common.dim(COMMANDS_HELP + "; Ctrl-C stops a reply", sys.stderr), file=sys.stderr)
        while True:
            try:
                line = read_user_line(interactive)
            except KeyboardInterrupt:
                print()
                return 0
            if line is None:
                return 0
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                return 0
            if text == "/reset":
                conversation.reset()
                print(common.dim("(conversation cleared)", sys.stderr), file=sys.stderr)
                continue
            if text == "/help":
                print(COMMANDS_HELP, file=sys.stderr)
                continue
            if text.startswith("/") and text[1:].isalpha():
                print(f"unknown command {text}; {COMMANDS_HELP}", file=sys.stderr)
                continue
            try:
                reply_to(model, conversation, text, kwargs)
            except KeyboardInterrupt:
                print()  # Ctrl-C before the reply started: back to the prompt
            except ContextOverflowError as e:
                print(f"pymtp: error: {e} (use /reset to start a new conversation)", file=sys.stderr)
            except PymtpError as e:
                print(f"pymtp: error: {e}", file=sys.stderr)
