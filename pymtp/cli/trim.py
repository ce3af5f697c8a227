"""`pymtp trim`: give an MTP head a draft vocabulary (the N tokens the base model uses most)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pymtp.cli import common
from pymtp.errors import InvalidArgumentError, PymtpError

DESCRIPTION = """\
Write a copy of an MTP head that scores only a draft vocabulary: the N tokens the
base model emits most, instead of all of them. On small models the head's LM head
is most of a draft step's cost (SmolLM2: 49152 rows), and a step pays it once per
drafted token, so a smaller one makes drafting cheaper; a token outside the draft
vocabulary can no longer be drafted (it is still generated: the target decides
every token, so the output is exactly the same; see docs/engine.md).

The tokens are counted in text the base model writes itself: the data `pymtp graft`
generated for this model if it is cached, else --counts, else the engine generates
--samples answers to the built-in prompts here (a few minutes on a CPU). The rows
are the base's own LM-head rows as stored (same quantization), so the scores of
kept tokens do not change. End-of-generation tokens are always kept.

Works on head-only GGUFs of dense models (pymtp graft's heads, e.g. the built-in
model's shipped head), and on models with MTP layers of their own (qwen35,
qwen35moe, glm4moe, step35): for those it writes a draft-vocabulary file, which
loads like a head (--mtp-head, or <model stem>.mtp.gguf next to the model).

The held-out coverage printed is the share of counted tokens (of a held-out
tenth) inside the draft vocabulary: a bound on what it can cost in acceptance;
--check-prompts measures the acceptance of both heads (or of the model's own MTP
layers with and without the draft vocabulary).

--type q8_0 also stores the head's own matrices (its block, input projection and
feature fusion; not the draft vocabulary's rows, which stay the base's) in 8 bits
instead of 16: on a CPU that makes a draft step cheaper again (the built-in head:
D ~0.11 -> ~0.09 of a plain step, the same acceptance). With --check-prompts the
written head is then also compared with a trimmed head of the matrices as stored,
and a loss of acceptance is warned about (quantized heads can silently stop
accepting)."""

EPILOG = """\
examples:
  pymtp trim -n 8192 -o smol-8k.mtp.gguf              # trim the built-in model's head
  pymtp trim -n 8192 --type q8_0 --check-prompts 32 -o smol-8k-q8.mtp.gguf   # 8-bit matrices, checked
  pymtp generate --mtp-head smol-8k.mtp.gguf -p "Hi"   # use it
  pymtp trim base.gguf --mtp-head base.mtp.gguf -n 4096 -o base.mtp.gguf.tmp --check-prompts 16
  pymtp trim base.gguf -n 8192 -o t.gguf --samples 64 --save-counts counts.npz   # reuse with --counts
  pymtp trim qwen3.6-27b.gguf -n 32768 -o qwen3.6-27b.mtp.gguf  # a model's own MTP layers"""


def register(subparsers) -> None:
    p = subparsers.add_parser("trim", help="give an MTP head a smaller draft vocabulary (cheaper drafts)",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("--mtp-head", default=None, metavar="FILE",
                   help="the head to trim (default: the head generate/chat would use for MODEL: the built-in "
                        "model's shipped head, or MODEL's <stem>.mtp.gguf)")
    p.add_argument("-n", "--draft-vocab", type=int, required=True, metavar="N",
                   help="tokens in the draft vocabulary, e.g. 8192")
    p.add_argument("-o", "--output", required=True, metavar="HEAD.gguf", help="the trimmed head to write")
    p.add_argument("--type", dest="head_type", choices=("f16", "q8_0"), default=None,
                   help="store the head's own matrices as f16 or q8_0 (default: as they are; not for a "
                        "model's own MTP layers)")
    c = p.add_argument_group("token counts")
    c.add_argument("--counts", type=Path, default=None, metavar="FILE",
                   help="token counts saved earlier with --save-counts (.npz)")
    c.add_argument("--data-cache", type=Path, default=None, metavar="DIR",
                   help="where `pymtp graft` caches its generated data (default: $PYMTP_CACHE_DIR/graft "
                        "or ~/.cache/pymtp/graft)")
    c.add_argument("--samples", type=int, default=128, metavar="S",
                   help="without cached graft data or --counts: answers the engine generates to count "
                        "tokens in (default: 128)")
    c.add_argument("--gen-tokens", type=int, default=192, metavar="T",
                   help="tokens per generated answer (default: 192)")
    c.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads for generation")
    c.add_argument("--save-counts", type=Path, default=None, metavar="FILE.npz",
                   help="also save the token counts (for --counts, or another N)")
    p.add_argument("--check-prompts", type=int, default=0, metavar="P",
                   help="measure the acceptance of the head and of the trimmed head on P held-out "
                        "prompts (greedy, draft length 3; default: 0, no check)")
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def validate(args) -> None:
    check = common.check
    check(args.draft_vocab >= 1, f"-n must be >= 1 (got {args.draft_vocab})")
    check(args.samples >= 1, f"--samples must be >= 1 (got {args.samples})")
    check(args.gen_tokens >= 1, f"--gen-tokens must be >= 1 (got {args.gen_tokens})")
    check(args.threads is None or args.threads >= 1, f"--threads must be >= 1 (got {args.threads})")
    check(args.check_prompts >= 0, f"--check-prompts must be >= 0 (got {args.check_prompts})")
    check(args.counts is None or args.counts.is_file(), f"--counts: no such file: {args.counts}")


def _say(msg: str) -> None:
    print(f"pymtp trim: {msg}", file=sys.stderr, flush=True)


def generate_counts(base: Path, n_vocab: int, samples: int, gen_tokens: int, threads) -> tuple:
    """(train counts, held-out counts): tokens of the base's own answers to built-in prompts
    (every 10th answer held out), half greedy, half sampled at T=0.8."""
    import numpy as np

    import pymtp
    from pymtp.graft.prompts import build_prompts

    counts = [np.zeros(n_vocab, np.int64), np.zeros(n_vocab, np.int64)]
    prompts = build_prompts(samples, seed=7919)   # not graft's held-out prompts (seed 0's first ones)
    with pymtp.Model(str(base), mtp="off", n_threads=threads) as m:
        for i, p in enumerate(prompts):
            run = m.generate if isinstance(p, str) else m.chat
            temp = 0.0 if i % 2 == 0 else 0.8
            toks = run(p, max_tokens=gen_tokens, temperature=temp, seed=i).tokens
            counts[i % 10 == 9] += np.bincount(np.asarray(toks, np.int64), minlength=n_vocab)[:n_vocab]
            print(f"\rpymtp trim: counting tokens in the base's own answers: {i + 1}/{len(prompts)}",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return counts[0], counts[1]


def run(args: argparse.Namespace) -> int:
    validate(args)
    import numpy as np

    from pymtp.cli.info import head_in_use
    from pymtp.gguf_meta import read_info
    from pymtp.graft import trim
    from pymtp.graft.gguf_weights import file_sha256

    base = common.resolve_model_path(args.model)
    info = read_info(base)
    own = info.n_mtp_layers > 0       # the model's own MTP layers: write a draft-vocabulary file
    if own:
        from pymtp._native import model_calls

        if args.mtp_head is not None:
            raise InvalidArgumentError(f"--mtp-head: {base.name} has MTP layers of its own; pymtp trim writes "
                                       "a draft-vocabulary file for them (leave --mtp-head out)")
        if args.head_type is not None:
            raise InvalidArgumentError(f"--type: {base.name} has MTP layers of its own, stored in the model; "
                                       "pymtp trim writes only their draft vocabulary (leave --type out)")
        if not model_calls.draft_vocab_arch(info.architecture):
            raise PymtpError(f"{base.name}: the MTP layers of '{info.architecture}' models cannot take a draft "
                             "vocabulary (supported: qwen35, qwen35moe, glm4moe, step35)")
        head_path = None
    else:
        head = head_in_use(base, info, args.mtp_head)
        if head is None:
            raise PymtpError(f"no MTP head for {base.name}: pass --mtp-head (pymtp graft trains one)")
        head_path = Path(head["path"])
    out = Path(args.output)
    if out.resolve() in {p.resolve() for p in (head_path, base) if p is not None}:
        raise InvalidArgumentError("-o must not be the head or the model itself")

    from pymtp.graft.tokenizer import Tokenizer

    tok = Tokenizer(base)
    try:
        n_vocab, eog = tok.n_vocab, list(tok.eog_ids)
    finally:
        tok.close()
    if args.draft_vocab >= n_vocab:
        raise InvalidArgumentError(f"-n must be smaller than the vocabulary ({n_vocab} tokens)")

    if args.counts is not None:
        counts, held = trim.load_counts(args.counts)
        source = f"counts from {args.counts}"
    else:
        from pymtp.graft.data import default_cache_dir
        from pymtp.graft.dataset import Dataset

        cached = trim.cached_graft_data(file_sha256(base), args.data_cache or default_cache_dir())
        if cached is not None:
            data = Dataset.load(cached)
            counts, held = trim.generated_counts(data, n_vocab), trim.generated_counts(data, n_vocab, val=True)
            source = f"the graft data cached at {cached}"
        else:
            counts, held = generate_counts(base, n_vocab, args.samples, args.gen_tokens, args.threads)
            source = f"{args.samples} answers generated here"
    if len(counts) != n_vocab:
        raise PymtpError(f"the token counts cover {len(counts)} tokens; {base.name} has {n_vocab}")
    if args.save_counts is not None:
        np.savez_compressed(args.save_counts, train=counts, **({"val": held} if held is not None else {}))
        _say(f"saved token counts to {args.save_counts}")

    ids = trim.choose(counts, args.draft_vocab, always=eog)
    extra = {}
    line = f"wrote {out}: draft vocabulary of {len(ids)} of {n_vocab} tokens (from {source})"
    if held is not None and held.sum():
        cov = trim.coverage(held, ids)
        extra["draft_vocab_coverage"] = cov
        line += f"; held-out coverage {cov:.4f}"
    if own:
        trim.draft_vocab_file(base, ids, out, extra_provenance=extra)
    else:
        trim.trim_head(head_path, base, ids, out, extra_provenance=extra, head_type=args.head_type)
        if args.head_type:
            line += f"; its matrices {args.head_type}"
    print(line)
    if own:
        from pymtp.engine.runtime import sidecar_path

        side = sidecar_path(base)
        print(f"{side.name} is next to the model: used automatically" if out.resolve() == side.resolve() else
              f"use it with --mtp-head {out}, or name it {side.name} next to the model (found automatically)")
    if args.check_prompts:
        from pymtp.graft.acceptance import QUANT_LOSS_WARN, measure, provenance
        from pymtp.graft.data import GenConfig, held_out_prompts
        from pymtp.graft.writer import copy_gguf

        prompts = held_out_prompts(GenConfig(), args.check_prompts)
        runs = [("model's MTP layers", "") if own else ("head", head_path)]
        as_stored = out.with_name(out.name + ".as-stored-check.gguf") if args.head_type else None
        try:
            if as_stored is not None:   # the same draft vocabulary, the matrices as they were
                trim.trim_head(head_path, base, ids, as_stored)
                runs.append(("trimmed head, matrices as stored", as_stored))
            runs.append(("trimmed head" + (f", {args.head_type} matrices" if args.head_type else ""), out))
            seen = []
            for name, path in runs:
                a = measure(base, path, prompts, k=3, n_threads=args.threads)
                seen.append(a)
                print(f"acceptance of the {name} (greedy, held-out prompts): {a.line()}")
        finally:
            if as_stored is not None:
                as_stored.unlink(missing_ok=True)
        if as_stored is not None:
            loss = seen[-2].per_position[0] - a.per_position[0]
            if loss > QUANT_LOSS_WARN:
                _say(f"warning: with {args.head_type} matrices the head accepts {loss:.3f} less at draft position 1 "
                     f"({a.per_position[0]:.3f} vs {seen[-2].per_position[0]:.3f}): trim it without --type")
        copy_gguf(out, out, provenance=provenance(a))     # the trimmed head records its own
    return 0
