# Does a row of a small decode batch round exactly like a one-token decode? (the GPU gap behind "MTP on == MTP off")
#
#     cd /tmp && REPO=/path/to/repo LD_PRELOAD=<the system libstdc++> python3 $REPO/bench/device/batch_invariance.py \
#         [MODEL.gguf ...]
#
# For each model (the tests' tiny F16 gemma3 and llama, plus any GGUF named on the command line): a prompt decoded in
# one batch, then a fixed continuation decoded one token at a time (MTP off's steps) and, from the same prompt, in
# batches of n = 2..8 tokens and in a mixed run of sizes (MTP on's verifies, all drafts accepted). Every continuation
# row's logits are compared with the one-token decodes' row: "bitwise" when all are equal, else the largest
# difference and how many rows differ. The KV cache the rows read is written by those same batches, as in MTP on.
# Last, a 96-token prefill's last row (its logits) with every row's hidden state kept, as MTP on's target decodes a
# prompt (the last layer then runs on every row), against MTP off's (the last layer runs on the output row only).
# ARCHS (default "gemma3 llama") picks the tiny models, each made with the seed 4321 (qwen2, qwen3 too); PREFILL_ONLY=1
# runs only the prefill check. Knobs read by ggml-cuda at start-up (GGML_CUDA_ROWS_INVARIANT=1 is upstream's kernel
# choices) act on the whole run; run it once per setting. Run from /tmp (the installed package) with pymtp_devtools
# from the repository.
import os
import sys
from pathlib import Path

import pymtp
from pymtp._native import llama as L
from pymtp._native import model_calls as M

sys.path.append(os.environ["REPO"])
import numpy as np  # noqa: E402

import pymtp_devtools.tiny_dense as td  # noqa: E402

PROMPT = "The history of the printing press begins in the fifteenth century, when"
TAIL = (" a goldsmith in Mainz combined movable metal type, oil-based ink and a screw press into a system that"
        " could produce books faster than any scribe. Within fifty years, presses were running in more than two"
        " hundred European cities, and the price of a book had fallen by an order of magnitude.")
MIXED = [1, 3, 2, 4, 1, 1, 5, 2, 8, 3, 6, 7]
OPTS = dict(n_ctx=1024, n_batch=256, n_threads=1, n_gpu_layers=int(os.environ.get("NGL", "99")))


def rows_by_batches(model: pymtp.Model, prompt: list[int], tail: list[int], sizes: list[int]) -> np.ndarray:
    """the tail's logits, one row per token, decoding the prompt in one batch and the tail in batches of `sizes`
    (cycled)"""
    lib = L.lib()
    ctx, n_vocab = model.rt.ctx, model.rt.n_vocab
    lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), -1, -1, -1)
    M.decode(ctx, prompt, 0, outputs=[len(prompt) - 1])
    out, i, k = [], 0, 0
    while i < len(tail):
        n = min(sizes[k % len(sizes)], len(tail) - i)
        M.decode(ctx, tail[i:i + n], len(prompt) + i)
        out.append(np.array(M.logits_rows(ctx, n, n_vocab), dtype=np.float32).reshape(n, n_vocab))
        i, k = i + n, k + 1
    return np.concatenate(out)


def check(path: Path, label: str) -> None:
    model = pymtp.Model(path, mtp="off", **OPTS)
    if os.environ.get("PREFILL_ONLY") == "1":
        print(f"{label}: prefill of 96 tokens, its last row with every row's hidden state kept against without: "
              f"{prefill_last_row(model)}")
        model.close()
        return
    prompt, tail = model.tokenize(PROMPT), model.tokenize(TAIL, add_special=False)[:48]
    ref = rows_by_batches(model, prompt, tail, [1])
    again = rows_by_batches(model, prompt, tail, [1])
    print(f"{label}: prompt {len(prompt)} tokens, {len(tail)} rows; 1-token decodes repeat bitwise: "
          f"{bool(np.array_equal(ref, again))}")
    for name, sizes in [*((f"n={n}", [n]) for n in range(2, 9)), ("mixed", MIXED)]:
        got = rows_by_batches(model, prompt, tail, sizes)
        diff = np.abs(got - ref).max(axis=1)
        same = (got == ref).all(axis=1)
        verdict = "bitwise" if same.all() else f"{int((~same).sum())} rows differ, max |diff| {diff.max():.3g}"
        argmax = int((got.argmax(axis=1) != ref.argmax(axis=1)).sum())
        print(f"  {name:6s} {verdict}; argmax differs in {argmax} rows")
    print(f"  prefill of 96 tokens, its last row with every row's hidden state kept (MTP on's target) against "
          f"without: {prefill_last_row(model)}")
    model.close()


def prefill_last_row(model: pymtp.Model) -> str:
    """the last prompt row's logits from a prefill as MTP off runs it (only that row's output) against one that also
    keeps every row's hidden state (MTP on's target: the last layer then runs on every row), in two new contexts of
    the model's weights"""
    lib, n_vocab = L.lib(), model.rt.n_vocab
    prompt = [(7 + 13 * i) % n_vocab for i in range(96)]
    rows = []
    for all_rows in (False, False, True):
        ctx = M.new_context(model.rt.model, 256, engine_attention=True)
        if all_rows:
            M.set_nextn_outputs(ctx, True)
        M.decode(ctx, prompt, 0, outputs=[len(prompt) - 1])
        rows.append(np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy())
        M.free_context(ctx)
    d = float(np.abs(rows[0] - rows[2]).max())
    argmax = "differs" if rows[0].argmax() != rows[2].argmax() else "same"
    again = "" if np.array_equal(rows[0], rows[1]) else " (MTP off's prefill itself does not repeat bitwise)"
    return ("bitwise" if d == 0 else f"max |diff| {d:.3g}, argmax {argmax}") + again


def main() -> int:
    print("GGML_CUDA_ROWS_INVARIANT =", os.environ.get("GGML_CUDA_ROWS_INVARIANT", "(default)"))
    for arch in os.environ.get("ARCHS", "gemma3 llama").split():
        check(td.make_tiny_dense(arch, Path(f"/tmp/bi-{arch}.gguf"), seed=4321), f"tiny {arch} (F16)")
    for p in sys.argv[1:]:
        check(Path(p), Path(p).name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
