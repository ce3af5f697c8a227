"""Does the torch forward match llama.cpp? (A mismatch silently ruins a grafted head.)

``compare_trunk(model)`` runs a few token sequences through llama.cpp (the pymtp native
library, a context with embeddings on: the final-norm output and the logits of every row)
and through :class:`pymtp.graft.torch_model.BaseModel`, and reports the largest differences
and the argmax agreement.

``compare_head(base, head)`` (needs a llama.cpp build with the dense MTP graph) does the same
for a grafted head: llama.cpp's MTP context fed the teacher-forced pairs (x_p, h_{p-1}) vs
:class:`pymtp.graft.torch_model.MTPHead`. A file of N chained heads (``pymtp graft --heads N``)
is checked head by head: head j runs in its own MTP context with
``llama_set_nextn_layer_offset(ctx, j)``, fed (x_p, g_{j-1}(p-1)) where g_{j-1} is llama.cpp's
own output hidden state of head j-1 (h_nextn), and torch runs the same chain.

    python -m pymtp.graft.check [MODEL.gguf] [--head HEAD.gguf] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DEFAULT_PROMPTS = (
    [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
    [{"role": "user", "content": "Write a haiku about autumn leaves."}],
    [{"role": "user", "content": "Explain what a hash table is to a beginner programmer."}],
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
)


def prompt_tokens(model, prompts=DEFAULT_PROMPTS) -> list[list[int]]:
    """Token ids of chat prompts (list of messages) or raw texts, tokenized by llama.cpp."""
    out = []
    for p in prompts:
        out.append(model.chat_tokens(p) if isinstance(p, list) else model.tokenize(p))
    return out


def llama_cpp_rows(model, seqs: list[list[int]], n_threads: int | None = None):
    """[(hidden [T, D], logits [T, V])] from llama.cpp for each token sequence (positions 0..):
    the final-norm output (embeddings, pooling none) and the logits of every row."""
    from pymtp._native import model_calls as mc

    rt = model.rt
    n_embd = mc.model_n_embd(rt.model)
    out = []
    for seq in seqs:
        ctx = mc.new_context(rt.model, len(seq), n_threads, embeddings=True)
        try:
            mc.decode(ctx, seq, 0)
            out.append((mc.embedding_rows(ctx, len(seq), n_embd), mc.logits_rows(ctx, len(seq), rt.n_vocab)))
        finally:
            mc.free_context(ctx)
    return out


def compare_trunk(path, prompts=DEFAULT_PROMPTS, n_threads: int | None = None, seqs=None) -> dict:
    """Torch vs llama.cpp on the base trunk: max |diff| of hidden states and logits, argmax
    agreement, and the mean KL(llama.cpp || torch) of the next-token distributions.

    With f32/f16 weights the two agree to float rounding. With quantized weights llama.cpp's CPU
    matmuls also quantize their activations to 8 bits (q8_0/q8_1 blocks), which torch does not:
    on SmolLM2 Q4_1 that leaves logit differences up to ~2.5 (|logits| up to ~38) but a mean KL
    of ~0.005 nats and the same argmax."""
    import torch

    import pymtp

    from .gguf_weights import load_base
    from .torch_model import BaseModel

    path = Path(path)
    with pymtp.Model(path, mtp="off", n_ctx=512, n_threads=n_threads) as model:
        if seqs is None:
            seqs = prompt_tokens(model, prompts)
        ref = llama_cpp_rows(model, seqs, n_threads)
    base = BaseModel(load_base(path, with_sha=False))
    rows = []
    agree = total = 0
    max_dl = max_dh = kl_sum = 0.0
    for seq, (h_ref, l_ref) in zip(seqs, ref):
        with torch.no_grad():
            h = base(torch.tensor([seq]))[0]
            logits = base.logits(h).numpy()
        h = h.numpy()
        dl = float(np.abs(logits - l_ref).max())
        dh = float(np.abs(h - h_ref).max())
        a = int((logits.argmax(-1) == l_ref.argmax(-1)).sum())
        lp_ref = torch.log_softmax(torch.from_numpy(l_ref).double(), -1)
        lp = torch.log_softmax(torch.from_numpy(logits).double(), -1)
        kl = float((lp_ref.exp() * (lp_ref - lp)).sum(-1).sum())
        rows.append({"n_tokens": len(seq), "max_abs_diff_logits": dl, "max_abs_diff_hidden": dh,
                     "logit_scale": float(np.abs(l_ref).max()), "argmax_agree": a / len(seq),
                     "mean_kl": kl / len(seq)})
        agree += a
        kl_sum += kl
        total += len(seq)
        max_dl, max_dh = max(max_dl, dl), max(max_dh, dh)
    return {"model": str(path), "n_sequences": len(seqs), "n_tokens": total,
            "max_abs_diff_logits": max_dl, "max_abs_diff_hidden": max_dh,
            "argmax_agreement": agree / total, "mean_kl": kl_sum / total, "per_sequence": rows}


def llama_cpp_head_rows(base_path, head_path, seqs: list[list[int]], n_heads: int = 1,
                        n_threads: int | None = None) -> list:
    """llama.cpp, teacher-forced, for each token sequence: (the target's h_p rows [T, D]: what the engine
    feeds the head, a feature head's fusion included; [(logits [T, V], output hidden [T, D]) per head]).
    The head is loaded as a sidecar (llama_model_load_from_file_with_mtp_head); head j runs in its own
    MTP context (its own KV) fed (x_p, g_{j-1}(p-1)), g_{-1} = h."""
    from pymtp._native import model_calls as mc
    from pymtp._native import vocab as vocab_calls

    model = mc.load_model(Path(base_path), n_gpu_layers=0, load_mtp=True, mtp_head=Path(head_path))
    if not model:
        raise RuntimeError(f"llama.cpp could not load the head: {mc.last_log_lines()}")
    try:
        n_embd = mc.model_n_embd(model)
        n_vocab = vocab_calls.n_tokens(mc.model_vocab(model))
        ref = []
        for seq in seqs:
            h = mc.target_nextn_rows(model, seq, n_threads)
            per_head, g = [], h
            for j in range(n_heads):
                mctx = mc.new_context(model, len(seq), n_threads, mtp=True)
                try:
                    mc.set_nextn_outputs(mctx, True, False)
                    if n_heads > 1:
                        mc.set_nextn_layer(mctx, j)
                    mc.decode(mctx, seq, 0, np.vstack([np.zeros((1, n_embd), np.float32), g[:-1]]))
                    g = mc.nextn_rows(mctx, len(seq), n_embd)
                    per_head.append((mc.logits_rows(mctx, len(seq), n_vocab), g))
                finally:
                    mc.free_context(mctx)
            ref.append((h, per_head))
    finally:
        mc.free_model(model)
    return ref


def torch_head_rows(base, heads: list, seq: list[int]) -> tuple:
    """torch, teacher-forced as training runs it, over one token sequence: (the head's input h_p rows
    [T, D] (a feature head fuses the trunk features into it, torch_model.MTPHead.fuse), the trunk's own
    logits [T, V], [(logits [T, V], output hidden [T, D]) per head]); numpy arrays. ``heads``: the
    MTPHead chain (head j fed head j-1's output of the row before)."""
    import torch

    from .torch_model import feature_layers, rope_tables

    hp = base.hp
    taps = feature_layers(hp.n_layer) if heads[0].features else ()
    with torch.no_grad():
        x = torch.tensor([seq])
        rows = base(x, taps)
        trunk_logits = base.logits(rows[..., :hp.n_embd])[0].numpy()
        h = heads[0].fuse(rows)
        cos, sin = rope_tables(torch.arange(len(seq)), hp.n_rot, hp.rope_base, hp.rope_freq_scale, base.rope_freqs)
        g, outs = h, []
        for head in heads:
            g, _ = head(base.tok_embd[x], torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], dim=1), cos, sin)
            outs.append((base.logits(g)[0].numpy(), g[0].numpy()))
    return h[0].numpy(), trunk_logits, outs


def compare_head(base_path, head_path, prompts=DEFAULT_PROMPTS, n_threads: int | None = None,
                 seqs=None) -> dict:
    """Torch vs llama.cpp on a grafted head: the target context's h_p (what the engine feeds the
    head; a feature head's fusion of h_p and the trunk features), then the MTP context fed the
    teacher-forced pairs (x_p, h_{p-1}) of each sequence: its logits and output hidden state. Needs a
    build with the dense MTP graph (native/models/dense-mtp.cpp); the head is loaded as a sidecar
    (llama_model_load_from_file_with_mtp_head).

    With N > 1 heads in the file every head is compared (see the module docstring): the top-level
    numbers are the worst over the heads, ``per_head`` has each head's own."""
    import pymtp

    from .gguf_weights import load_base
    from .torch_model import BaseModel, MTPHead

    base_path, head_path = Path(base_path), Path(head_path)
    if seqs is None:
        with pymtp.Model(base_path, mtp="off", n_ctx=512, n_threads=n_threads) as model:
            seqs = prompt_tokens(model, prompts)
    from pymtp.gguf_meta import read_info

    n_heads = max(1, read_info(head_path).n_mtp_layers)
    ref = llama_cpp_head_rows(base_path, head_path, seqs, n_heads, n_threads)
    base_g = load_base(base_path, with_sha=False)
    base = BaseModel(base_g)
    heads = [MTPHead.from_gguf(base_g.hparams, head_path, index=j) for j in range(n_heads)]
    per = [{"max_abs_diff_mtp_logits": 0.0, "max_abs_diff_mtp_hidden": 0.0, "agree": 0}
           for _ in range(n_heads)]
    res = {"max_abs_diff_target_hidden": 0.0, "n_tokens": 0, "n_heads": n_heads,
           "loaded_as": "sidecar"}
    for seq, (h_ref, heads_ref) in zip(seqs, ref):
        h, _, outs = torch_head_rows(base, heads, seq)
        res["max_abs_diff_target_hidden"] = max(res["max_abs_diff_target_hidden"], float(np.abs(h - h_ref).max()))
        for (logits, out), st, (l_ref, o_ref) in zip(outs, per, heads_ref):
            st["max_abs_diff_mtp_logits"] = max(st["max_abs_diff_mtp_logits"], float(np.abs(logits - l_ref).max()))
            st["max_abs_diff_mtp_hidden"] = max(st["max_abs_diff_mtp_hidden"], float(np.abs(out - o_ref).max()))
            st["agree"] += int((logits.argmax(-1) == l_ref.argmax(-1)).sum())
        res["n_tokens"] += len(seq)
    n = max(res["n_tokens"], 1)
    per_head = [{"head": j, "max_abs_diff_mtp_logits": st["max_abs_diff_mtp_logits"],
                 "max_abs_diff_mtp_hidden": st["max_abs_diff_mtp_hidden"],
                 "mtp_argmax_agreement": st["agree"] / n} for j, st in enumerate(per)]
    res["max_abs_diff_mtp_logits"] = max(p["max_abs_diff_mtp_logits"] for p in per_head)
    res["max_abs_diff_mtp_hidden"] = max(p["max_abs_diff_mtp_hidden"] for p in per_head)
    res["mtp_argmax_agreement"] = min(p["mtp_argmax_agreement"] for p in per_head)
    res["per_head"] = per_head
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pymtp.graft.check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default=None, help="base GGUF (default: the built-in model)")
    p.add_argument("--head", default=None, help="a grafted head GGUF: also compare the MTP head's logits")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.model is None:
        from pymtp.default_model import default_model_path
        args.model = str(default_model_path())
    res = compare_trunk(args.model, n_threads=args.threads)
    if args.head:
        res["head"] = compare_head(args.model, args.head, n_threads=args.threads)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['model']}: {res['n_sequences']} sequences, {res['n_tokens']} tokens")
        print(f"  max |logits diff| {res['max_abs_diff_logits']:.4g}   "
              f"max |hidden diff| {res['max_abs_diff_hidden']:.4g}   "
              f"argmax agreement {res['argmax_agreement']:.4f}   mean KL {res['mean_kl']:.2g} nats")
        for r in res["per_sequence"]:
            print(f"    {r['n_tokens']:4d} tokens: logits {r['max_abs_diff_logits']:.4g} "
                  f"(|logit| max {r['logit_scale']:.3g}), hidden {r['max_abs_diff_hidden']:.4g}, "
                  f"argmax {r['argmax_agree']:.3f}")
        if "head" in res:
            h = res["head"]
            print(f"  head ({h['loaded_as']}): max |MTP logits diff| {h['max_abs_diff_mtp_logits']:.4g}   "
                  f"max |MTP hidden diff| {h['max_abs_diff_mtp_hidden']:.4g}   "
                  f"argmax agreement {h['mtp_argmax_agreement']:.4f}   "
                  f"(target h_p diff {h['max_abs_diff_target_hidden']:.4g})")
            if h["n_heads"] > 1:
                for p in h["per_head"]:
                    print(f"    head {p['head']}: max |MTP logits diff| {p['max_abs_diff_mtp_logits']:.4g}   "
                          f"max |MTP hidden diff| {p['max_abs_diff_mtp_hidden']:.4g}   "
                          f"argmax agreement {p['mtp_argmax_agreement']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
