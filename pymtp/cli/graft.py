"""`pymtp graft`: train an MTP head for a base model that has none (needs PyTorch)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pymtp.cli import common
from pymtp.errors import InvalidArgumentError, PymtpError

DESCRIPTION = """\
Train an MTP (multi-token prediction) head for a GGUF base model that ships
without one, by self-distillation, and write it as a head-only GGUF that pymtp
loads next to the base (--mtp-head, or <model>.mtp.gguf beside the model).

1. data: the base model generates text from a built-in, varied prompt set
   (questions, writing, code, math, rewriting; chat-formatted with the model's
   own template; half greedy, half sampled at T~0.8-1.0), plus optional --corpus
   text files; cached in --data-cache and reused;
2. training: only the head trains (one decoder block of the base's own kind,
   initialised from its last layer, + eh_proj/enorm/hnorm/shared_head_norm; the
   embeddings and LM head are the base's, frozen and not written). It learns
   the base's next-token distribution one step further (KL), including chained
   draft steps fed its own output (--chain);
   --heads N trains N chained heads instead, one per draft step: head j gets the
   real token x_p and head j-1's output hidden state of position p-1 (head 0:
   the base's), so it sees the base's context only up to p-1-j, and predicts
   x_{p+1} like the others; each head has its own attention (KV) over its own
   entries. All heads train together, teacher-forced, the loss summed over
   heads (weights 1, 1/2, 1/4, ...); the validation reports each head's top-1
   agreement with the base;
   --parallel K trains a parallel head instead: one pass drafts K tokens, from
   the real entry (x_p, h_{p-1}) and K-1 learned mask entries at p+1..p+K-1
   (the mask rows are trained tensors stored in the head); entry i predicts
   x_{p+1+i}, so the draft cost stays one MTP decode whatever K is. The engine
   drafts with it without new flags (at most K tokens a step);
   by default (--features) the head is fed, in place of the base's final hidden
   state, a learned fusion of it with the residual streams entering two trunk
   layers (a quarter and half of the depth; EAGLE-3-style): the fusion matrix
   is stored in the head and the base's graph computes it while MTP is on;
   --no-features trains a head fed the final hidden state alone;
3. output: HEAD.gguf (f16 or q8_0 matrices; N heads: nextn_predict_layers = N,
   blocks n_layer .. n_layer+N-1) with provenance keys, a resumable
   checkpoint HEAD.gguf.ckpt.pt, and optionally a JSON report;
4. check: the written head drafts greedily through the native engine on
   held-out prompts; its acceptance per draft position is printed, stored in
   the report and in the head (pymtp info shows it). A --type q8_0 head is
   compared with its f16 original and a loss of acceptance is warned about.

Architectures: llama, qwen2, qwen3, gemma3 (dense). Uses CUDA when available."""

EPILOG = """\
examples:
  pymtp graft -o smollm2.mtp.gguf                      # the built-in model, default recipe
  pymtp graft base.gguf -o head.gguf --report graft.json   # ~10 min on one H100 for SmolLM2
  pymtp graft base.gguf -o head.gguf --device cpu --samples 64 --steps 200 --batch 4 --seq-len 256
  pymtp graft base.gguf -o head.gguf --resume           # continue an interrupted run
  pymtp graft base.gguf -o base.mtp3.gguf --heads 3     # 3 chained heads (one per draft step)
  pymtp graft base.gguf -o base.par4.gguf --parallel 4  # 4 drafts in one MTP decode
  pymtp graft base.gguf -o par4.gguf --parallel 4 --init-head head.gguf --steps 1500
                                                        # a parallel head from a trained one
  pymtp generate base.gguf --mtp-head head.gguf -p "Hello"   # use the head"""

TORCH_MISSING = "pymtp graft needs PyTorch: pip install 'pymtp[graft]'"


def register(subparsers) -> None:
    p = subparsers.add_parser("graft", help="train an MTP head for a model without one (PyTorch)",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="HEAD.gguf", help="the head GGUF to write")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=6000, metavar="N", help="optimizer steps (default: 6000)")
    g.add_argument("--batch", type=int, default=16, metavar="B", help="sequences per step (default: 16)")
    g.add_argument("--seq-len", type=int, default=512, metavar="L",
                   help="tokens per sequence, longer ones are cut (default: 512)")
    g.add_argument("--lr", type=float, default=1e-3, metavar="LR", help="peak learning rate (default: 1e-3)")
    g.add_argument("--seed", type=int, default=0, metavar="S", help="seed for data and training (default: 0)")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to train (default: auto = cuda if available)")
    g.add_argument("--threads", type=int, default=0, metavar="N",
                   help="CPU threads for PyTorch (default: PyTorch's choice; 1 can be much faster on "
                        "a busy machine)")
    g.add_argument("--heads", type=int, default=1, metavar="N",
                   help="MTP heads to train and write, 1..8: head j drafts step j+1, fed head j-1's "
                        "output hidden state (default: 1; with N > 1 each head is one draft step and "
                        "--chain does not apply)")
    g.add_argument("--parallel", type=int, default=0, metavar="K",
                   help="train a parallel head: one MTP decode drafts K tokens (2..8), from the real "
                        "entry and K-1 learned mask entries; takes neither --heads N nor --chain "
                        "(default: 0 = a sequential head, one token per MTP decode)")
    g.add_argument("--features", action=argparse.BooleanOptionalAction, default=True,
                   help="feed the head the base's final hidden state fused with two of its layers' inputs "
                        "(a quarter and half of the depth) through a learned matrix, EAGLE-3-style; "
                        "--no-features: the final hidden state alone (default: on; on SmolLM2 it lifts "
                        "MT-Bench acceptance at position 1 from 0.55 to 0.62; the cached hidden states "
                        "take 3x the memory, see --cache-gb)")
    g.add_argument("--chain", type=int, default=None, metavar="K",
                   help="draft steps trained for one head (--heads 1): 1 = teacher-forced only, "
                        "K > 1 also trains steps 2..K fed the head's own output (default: 2)")
    g.add_argument("--step-weights", choices=("geometric", "acceptance"), default="geometric",
                   help="how the loss of a later draft step (--chain, --heads, or a parallel head's "
                        "mask entries) counts: geometric = half the step before's, everywhere; "
                        "acceptance = at each position, the chance the earlier steps' drafts there "
                        "are accepted, so later steps learn where their drafts can count "
                        "(default: geometric)")
    g.add_argument("--step-decay", type=float, default=0.5, metavar="R",
                   help="geometric step weights: a later draft step (or parallel entry) counts R times "
                        "the one before it (0 < R <= 1). A smaller R keeps more of a parallel head's "
                        "one block on entry 0, the draft every step verifies first (default: 0.5)")
    g.add_argument("--init", choices=("mix", "h", "e"), default="mix",
                   help="eh_proj initialisation: mix = [I/2 | I/2], h = [0 | I], e = [I | 0] "
                        "(default: mix)")
    g.add_argument("--init-head", type=Path, default=None, metavar="HEAD.gguf",
                   help="start from a head pymtp graft wrote for this base instead of from the base's last "
                        "layer: train it on (more steps, other data), or make it a parallel head (--parallel "
                        "K adds the mask rows) or a feature head; its settings must allow it; with "
                        "--resume, a checkpoint of the same run wins (default: none)")
    g.add_argument("--loss-positions", choices=("generated", "all"), default="generated",
                   help="positions trained and validated: generated = where drafts are made (the "
                        "generated part of each sequence; all of a --corpus text), all = prompts too "
                        "(default: generated)")
    g.add_argument("--ce-weight", type=float, default=0.0, metavar="W",
                   help="add W x cross-entropy on the actual next token to the KL loss (default: 0)")
    g.add_argument("--resume", action="store_true",
                   help="continue from HEAD.gguf.ckpt.pt if it exists")
    g.add_argument("--report", type=Path, default=None, metavar="FILE.json",
                   help="write a JSON report (settings, losses, validation, timings)")
    d = p.add_argument_group("data")
    d.add_argument("--samples", type=int, default=10000, metavar="N",
                   help="sequences the base generates for training (default: 10000)")
    d.add_argument("--gen-tokens", type=int, default=256, metavar="T",
                   help="new tokens per generated sequence, at most (default: 256)")
    d.add_argument("--greedy-frac", type=float, default=0.5, metavar="F",
                   help="share of the sequences generated greedily, the rest sampled at T~0.8-1.0 "
                        "(default: 0.5)")
    d.add_argument("--self-prompts", type=float, default=0.0, metavar="F",
                   help="share of the sequences answering a prompt the base writes itself: its chat "
                        "template up to a user's message, sampled on from there (the requests an instruct "
                        "model was tuned on, closer to real chats than the built-in prompts; default: 0)")
    d.add_argument("--gen-batch", type=int, default=0, metavar="B",
                   help="sequences generated at once (default: as many as ~30%% of free GPU memory "
                        "holds, at most 1024; 32 on CPU)")
    d.add_argument("--corpus", action="append", default=[], metavar="FILE",
                   help="a plain-text file to train on as well (repeatable)")
    d.add_argument("--data-cache", type=Path, default=None, metavar="DIR",
                   help="where generated data is cached (default: $PYMTP_CACHE_DIR/graft "
                        "or ~/.cache/pymtp/graft)")
    d.add_argument("--cache-gb", type=float, default=8.0, metavar="GB",
                   help="keep the trunk's hidden states in memory up to this size, else recompute "
                        "them every step (default: 8)")
    o = p.add_argument_group("output")
    o.add_argument("--type", dest="head_type", choices=("f16", "q8_0"), default="f16",
                   help="storage type of the head's matrices (default: f16)")
    o.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                   help="score only the N tokens the base emits most in the training data (a draft "
                        "vocabulary: cheaper draft steps; see pymtp trim). The head also trains on "
                        "them (the base's distribution renormalised there), so a training step's "
                        "LM-head work is N/vocab of the whole: on a 262k-vocabulary model (Gemma 3) "
                        "that is most of a step. 0 = the whole vocabulary (default: 0)")
    o.add_argument("--check-prompts", type=int, default=24, metavar="N",
                   help="after training, generate greedily from N held-out prompts through the native "
                        "engine with the written head, report its acceptance per draft position and "
                        "record it in the head (pymtp info shows it); a quantized head is compared "
                        "with its f16 original; 0 skips this (default: 24)")
    o.add_argument("--quiet", action="store_true", help="no progress bars")
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def validate(args) -> None:
    check = common.check
    check(args.steps >= 1, f"--steps must be >= 1 (got {args.steps})")
    check(args.batch >= 1, f"--batch must be >= 1 (got {args.batch})")
    check(args.seq_len >= 8, f"--seq-len must be >= 8 (got {args.seq_len})")
    check(args.lr > 0, f"--lr must be > 0 (got {args.lr})")
    check(args.seed >= 0, f"--seed must be >= 0 (got {args.seed})")
    check(args.threads >= 0, f"--threads must be >= 0 (got {args.threads})")
    check(1 <= args.heads <= 8, f"--heads must be in 1..8 (got {args.heads})")
    check(args.chain is None or 1 <= args.chain <= 8, f"--chain must be in 1..8 (got {args.chain})")
    check(args.chain is None or args.heads == 1,
          "--chain applies to --heads 1 only (with --heads N each head is one draft step)")
    check(args.parallel == 0 or 2 <= args.parallel <= 8, f"--parallel must be in 2..8 (got {args.parallel})")
    check(args.parallel == 0 or (args.heads == 1 and args.chain in (None, 1)),
          "--parallel K trains one head, teacher-forced: it takes neither --heads N nor --chain")
    check(args.samples >= 0, f"--samples must be >= 0 (got {args.samples})")
    check(args.samples > 0 or args.corpus, "--samples 0 needs --corpus files")
    check(args.samples == 0 or args.samples >= 2, f"--samples must be >= 2 (got {args.samples})")
    check(args.gen_tokens >= 1, f"--gen-tokens must be >= 1 (got {args.gen_tokens})")
    check(args.gen_batch >= 0, f"--gen-batch must be >= 0 (got {args.gen_batch})")
    check(0 <= args.greedy_frac <= 1, f"--greedy-frac must be in 0..1 (got {args.greedy_frac})")
    check(0 <= args.self_prompts <= 1, f"--self-prompts must be in 0..1 (got {args.self_prompts})")
    check(0 < args.step_decay <= 1, f"--step-decay must be in (0, 1] (got {args.step_decay})")
    check(args.step_decay == 0.5 or args.step_weights == "geometric",
          "--step-decay sets geometric step weights: it does not go with --step-weights acceptance")
    check(args.ce_weight >= 0, f"--ce-weight must be >= 0 (got {args.ce_weight})")
    check(args.cache_gb >= 0, f"--cache-gb must be >= 0 (got {args.cache_gb})")
    check(args.check_prompts >= 0, f"--check-prompts must be >= 0 (got {args.check_prompts})")
    check(args.draft_vocab >= 0, f"--draft-vocab must be >= 0 (got {args.draft_vocab})")
    check(args.init_head is None or args.init_head.is_file(), f"--init-head: no such file: {args.init_head}")
    check(args.init_head is None or args.heads == 1, "--init-head continues one head: it takes no --heads N")
    for f in args.corpus:
        check(Path(f).is_file(), f"--corpus: no such file: {f}")


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise PymtpError(TORCH_MISSING) from e


def open_tokenizer(base, args):
    """The base's tokenizer (libllama, vocab only), opened and used for every prompt and corpus
    text *before* PyTorch/numpy load: on a system where libllama's CUDA build carries its own
    libstdc++ pieces, a process that loaded the system libstdc++ first (numpy, torch) crashes
    in the vocab's std::regex (bench/device/README.md). The training code then only reads the
    memoized results."""
    from pymtp.graft.tokenizer import Tokenizer, pretokenize

    tok = Tokenizer(base)
    try:
        pretokenize(tok, args.samples, args.seed, args.corpus, self_prompts=args.self_prompts > 0)
    except BaseException:
        tok.close()
        raise
    return tok


def run(args: argparse.Namespace) -> int:
    validate(args)
    import importlib.util

    if importlib.util.find_spec("torch") is None:        # without importing it (see open_tokenizer)
        raise PymtpError(TORCH_MISSING)
    base = common.resolve_model_path(args.model)
    out = Path(args.output)
    if out.resolve() == Path(base).resolve():
        raise InvalidArgumentError("-o must not be the base model itself")
    tok = open_tokenizer(base, args)
    try:
        require_torch()
        from pymtp.graft.data import GenConfig
        from pymtp.graft.train import GraftJob, TrainConfig, graft
    except BaseException:
        tok.close()
        raise

    job = GraftJob(
        base=Path(base), out=out,
        train=TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr,
                          seed=args.seed, device=args.device,
                          chain=args.chain if args.chain is not None else
                          (2 if args.heads == 1 and not args.parallel else 1), parallel=args.parallel,
                          init=args.init, ce_weight=args.ce_weight, cache_gb=args.cache_gb,
                          threads=args.threads, loss_positions=args.loss_positions, heads=args.heads,
                          features=args.features, step_weights=args.step_weights, chain_weight=args.step_decay,
                          init_head=str(args.init_head or "")),
        gen=GenConfig(samples=args.samples, gen_tokens=args.gen_tokens, seed=args.seed,
                      greedy_frac=args.greedy_frac, self_prompts=args.self_prompts),
        corpus=[Path(f) for f in args.corpus], head_type=args.head_type, resume=args.resume,
        report=args.report, data_cache=args.data_cache, gen_batch=args.gen_batch,
        progress=not args.quiet, tokenizer=tok, check_prompts=args.check_prompts, draft_vocab=args.draft_vocab,
    )
    report = graft(job)
    val = report["final"]["val"]
    line = f"wrote {out}"
    if args.heads > 1:
        line += f" ({args.heads} heads)"
    if args.parallel:
        line += f" (parallel, {args.parallel} drafts a decode)"
    if args.features:
        line += " (fed trunk features)"
    if val:
        if args.heads > 1:
            line += ": val top-1 agreement with the base per head: " + ", ".join(
                f"head {j} {s['agree']:.3f}" for j, s in enumerate(val["per_step"]))
        else:
            line += f": val top-1 agreement {val['agree']:.3f}"
            if len(val["per_step"]) > 1:
                line += (" (draft positions: " + ", ".join(f"{s['agree']:.3f}" for s in val["per_step"])
                         + f"; drafts accepted a step, teacher-forced: {val['est_accepted_per_step']:.2f})")
    print(line)
    acc = report.get("acceptance")
    if acc:
        rates = " / ".join(f"{a:.3f}" for a in acc["accept_per_position"])
        print(f"held-out acceptance by draft position (greedy, {acc['n_prompts']} prompts): {rates}, "
              f"AL({acc['k']}) {acc['AL_by_k'][-1]:.2f}")
    return 0
