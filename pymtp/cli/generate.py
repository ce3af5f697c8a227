"""`pymtp generate`: one completion for one prompt, streamed to stdout."""

from __future__ import annotations

import argparse
import json
import sys

from pymtp.chat_template import with_chat_stops
from pymtp.cli import common
from pymtp.errors import InvalidArgumentError

DESCRIPTION = """\
Generate text from a prompt. The text is streamed to stdout as it is produced;
a line of statistics (speed, MTP draft acceptance) follows on stderr.

With MTP (multi-token prediction) the model's own MTP layers draft up to K
tokens ahead and the main model verifies them in one batch: same output as
plain decoding at temperature 0, fewer forward passes. --mtp auto uses MTP
whenever the model has MTP layers (see `pymtp info MODEL`).

--chat wraps the prompt as one user turn in the model's chat template
(ChatML if the model has none) - use it for instruct/chat models."""

EPILOG = """\
examples:
  pymtp generate -p "The capital of France is"
  pymtp generate model.gguf --chat -p "Write a haiku about GPUs" -n 64
  pymtp generate model.gguf -p "def fib(n):" --stop "\\n\\n" --n-draft 4
  echo "Summarize: ..." | pymtp generate model.gguf --chat -p -
  pymtp generate model.gguf -p "Hello" --json | jq .stats.mean_accepted_length
  pymtp generate model.gguf -p "Hello" --mtp off      # baseline without MTP
  pymtp generate -p "The capital of France is" -n 4 --json --logprobs 3 | jq .logprobs

JSON output (--json) is one object: {"text", "tokens", "finish_reason", "stats"}, plus with
--logprobs N "logprobs": per token {"token", "text", "logprob", "top": N x {"token", "text",
"logprob"}}, the model's own distribution (before sampling), identical with MTP on and off."""


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate a completion for a prompt",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("-p", "--prompt", required=True, metavar="PROMPT",
                   help="the prompt text; - reads it from stdin")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt as a user turn in the model's chat template")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (text, tokens, finish_reason, stats) instead of streaming")
    p.add_argument("--no-stream", action="store_true",
                   help="print the text once generation has finished")
    p.add_argument("--logprobs", type=int, default=None, metavar="N",
                   help="with --json: each token's log-probability and the N most likely tokens (0..100)")
    common.add_sampling_args(p, default_n=128)
    common.add_engine_args(p)
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def read_prompt(prompt_arg: str) -> str:
    prompt = sys.stdin.read() if prompt_arg == "-" else prompt_arg
    if not prompt:
        raise InvalidArgumentError("the prompt is empty" + (" (nothing on stdin)" if prompt_arg == "-" else ""))
    return prompt


def stream_to_stdout(stream):
    """Print text deltas as they come; Ctrl-C cancels. Returns (completion, interrupted)."""
    interrupted = False
    try:
        for delta in stream:
            sys.stdout.write(delta)
            sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
        stream.cancel()
    return stream.result, interrupted


def run(args: argparse.Namespace) -> int:
    common.validate_args(args)
    if args.logprobs is not None and not args.json:
        raise InvalidArgumentError("--logprobs goes with --json (the log-probabilities are part of the JSON output)")
    prompt = read_prompt(args.prompt)
    with common.load_model(args) as model:
        kwargs = common.sampling_kwargs(args)
        if args.chat:
            prompt = model.chat_tokens([{"role": "user", "content": prompt}])
            kwargs["stop"] = with_chat_stops(model.chat_template(), kwargs.get("stop"))
        if args.logprobs is not None:
            kwargs["logprobs"] = args.logprobs
        interrupted = False
        if args.json or args.no_stream:
            completion = model.generate(prompt, stream=False, **kwargs)
            if args.json:
                print(json.dumps(completion.to_dict()))
            else:
                sys.stdout.write(completion.text)
        else:
            completion, interrupted = stream_to_stdout(model.generate(prompt, stream=True, **kwargs))
        if not args.json and completion.text and not completion.text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        print(completion.stats.summary_line(), file=sys.stderr)
    return 130 if interrupted else 0
