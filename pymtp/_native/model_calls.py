"""Direct llama.cpp calls on a model and plain contexts, for code that runs the model itself
rather than through the MTP engine (whose resources live in pymtp.engine.runtime):
pymtp.graft's tokenizer (a vocabulary-only load) and its checks (decode a batch, read every
row's logits and hidden states, MTP contexts fed given hidden states).

Handles are the C pointers; free what you create with free_context / free_model. numpy is
imported only by the functions that return rows: importing this module must not load it
(pymtp.cli.graft tokenizes before numpy is loaded, see pymtp.graft.tokenizer.pretokenize).
"""

from __future__ import annotations

import ctypes as C
from pathlib import Path

from . import llama as L
from .llama import LLAMA_CONTEXT_TYPE_DEFAULT, LLAMA_CONTEXT_TYPE_MTP, last_log_lines  # noqa: F401 (re-exported)

# --------------------------------------------------------------------------- models

def draft_vocab_arch(arch: str) -> bool:
    """Whether the MTP layers of models of this architecture can take a draft vocabulary (pymtp trim)."""
    return bool(L.lib().llama_mtp_draft_vocab_arch(arch.encode()))


def load_model(path: str | Path, *, vocab_only: bool = False, n_gpu_layers: int | None = None,
               load_mtp: bool | None = None, mtp_head: str | Path | None = None, repack: bool | None = None):
    """llama_model_load_from_file with these parameters (the rest llama.cpp's defaults); with mtp_head,
    llama_model_load_from_file_with_mtp_head (the head-only GGUF loaded as a sidecar). ``repack=False``:
    no extra buffer types (ggml-cpu keeps the weights in their GGUF layout instead of repacking them).
    Returns the model handle, or None when llama.cpp could not load it (last_log_lines() says why)."""
    lib = L.lib()
    mp = lib.llama_model_default_params()
    if vocab_only:
        mp.vocab_only = True
    if n_gpu_layers is not None:
        mp.n_gpu_layers = n_gpu_layers
    if load_mtp is not None:
        mp.load_mtp = load_mtp
    if repack is not None:
        mp.use_extra_bufts = repack
    if mtp_head is not None:
        return lib.llama_model_load_from_file_with_mtp_head(str(path).encode(), str(mtp_head).encode(), mp) or None
    return lib.llama_model_load_from_file(str(path).encode(), mp) or None


def free_model(model) -> None:
    L.lib().llama_model_free(model)


def model_vocab(model):
    """The model's llama_vocab (for pymtp._native.vocab's calls)."""
    return L.lib().llama_model_get_vocab(model)


def model_n_embd(model) -> int:
    return int(L.lib().llama_model_n_embd(model))


# --------------------------------------------------------------------------- contexts

def new_context(model, n_tokens: int, n_threads: int | None = None, *, mtp: bool = False,
                embeddings: bool = False, engine_attention: bool = False):
    """A one-sequence context for checks: room for ``n_tokens`` in one batch, every row's output
    (pooling none), an f32 KV cache (only the weights' own rounding is left), no flash attention.
    ``mtp``: an MTP context (the model's MTP graph); ``embeddings``: the final-norm output rows
    are kept (embedding_rows); ``engine_attention``: llama.cpp's default cache type and flash
    attention setting instead, as the engine's contexts run. Raises RuntimeError when llama.cpp
    cannot create it."""
    lib = L.lib()
    cp = lib.llama_context_default_params()
    cp.n_ctx = max(256, n_tokens + 8)
    cp.n_batch = cp.n_ubatch = max(n_tokens, 8)
    cp.n_seq_max = 1
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP if mtp else LLAMA_CONTEXT_TYPE_DEFAULT
    cp.embeddings = embeddings
    cp.pooling_type = 0          # LLAMA_POOLING_TYPE_NONE: one row per token
    if not engine_attention:
        cp.type_k = cp.type_v = 0    # f32 KV cache
        cp.flash_attn_type = 0
    cp.no_perf = True
    if n_threads:
        cp.n_threads = cp.n_threads_batch = n_threads
    ctx = lib.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError(f"could not create a llama.cpp context: {last_log_lines()}")
    return ctx


def free_context(ctx) -> None:
    L.lib().llama_free(ctx)


def set_nextn_outputs(ctx, on: bool = True, outputs_only: bool = False) -> None:
    """Keep the MTP-input hidden state (h_nextn) of every row (outputs_only: of output rows only)."""
    L.lib().llama_set_embeddings_nextn(ctx, on, outputs_only)


def set_nextn_layer(ctx, index: int) -> None:
    """Which of the model's MTP layers an MTP context runs (models or heads with several)."""
    L.lib().llama_set_nextn_layer_offset(ctx, index)


def decode(ctx, tokens: list[int], pos0: int = 0, hidden=None, outputs=None) -> None:
    """Decode ``tokens`` at positions pos0.. in one batch, every row an output (``outputs``: only the
    rows at these indices). ``hidden`` (array [n, n_embd]): the rows' input hidden states, for an MTP
    context. Raises RuntimeError when llama_decode fails."""
    n = len(tokens)
    tok = (L.llama_token * n)(*tokens)
    pos = (L.llama_pos * n)(*range(pos0, pos0 + n))
    out = (C.c_int8 * n)(*([1] * n if outputs is None else [int(i in outputs) for i in range(n)]))
    batch = L.llama_batch(n_tokens=n, token=tok, pos=pos, logits=out)
    if hidden is not None:
        import numpy as np

        emb = np.ascontiguousarray(hidden, dtype=np.float32)
        batch.embd = emb.ctypes.data_as(C.POINTER(C.c_float))
    rc = L.lib().llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode failed ({rc}): {last_log_lines()}")


# --------------------------------------------------------------------------- output rows

def _rows(fn, ctx, n, width: int):
    """Rows 0..n-1 of an output (n: an int), or the rows at the batch indices n (a list)."""
    import numpy as np

    rows = range(n) if isinstance(n, int) else n
    return np.stack([np.ctypeslib.as_array(fn(ctx, i), (width,)).copy() for i in rows])


def logits_rows(ctx, n: int, n_vocab: int):
    """The logits of the last decode's first n rows: array [n, n_vocab]."""
    return _rows(L.lib().llama_get_logits_ith, ctx, n, n_vocab)


def embedding_rows(ctx, n: int, n_embd: int):
    """The final-norm output of the first n rows (a context made with embeddings=True): [n, n_embd]."""
    return _rows(_embeddings_ith(), ctx, n, n_embd)


def nextn_rows(ctx, n: int, n_embd: int):
    """The MTP hidden states (h_nextn) of the first n rows (after set_nextn_outputs): [n, n_embd]."""
    return _rows(L.lib().llama_get_embeddings_nextn_ith, ctx, n, n_embd)


def target_nextn_rows(model, tokens: list[int], n_threads: int | None = None, outputs=None):
    """What a target context of ``model`` publishes for its MTP head (h_nextn) when it decodes ``tokens``
    at positions 0..: every row, [n, n_embd]; with ``outputs`` (batch indices) only those rows are
    outputs and the context keeps the MTP rows of its outputs only (masked), returned in that order."""
    ctx = new_context(model, len(tokens), n_threads)
    try:
        set_nextn_outputs(ctx, True, outputs is not None)
        decode(ctx, tokens, 0, outputs=outputs)
        return _rows(L.lib().llama_get_embeddings_nextn_ith, ctx,
                     len(tokens) if outputs is None else list(outputs), model_n_embd(model))
    finally:
        free_context(ctx)


def _embeddings_ith():
    """llama_get_embeddings_ith, which the engine bindings do not declare (declared here only)."""
    lib = L.lib()
    fn = lib.llama_get_embeddings_ith if hasattr(lib, "llama_get_embeddings_ith") else None
    if fn is None:
        from .lib import load

        fn = load().llama_get_embeddings_ith
        fn.restype, fn.argtypes = C.POINTER(C.c_float), [C.c_void_p, C.c_int32]
    return fn
