"""ctypes declarations of the parts of llama.h and llama-mtp.h that pymtp uses.

Struct layouts mirror the pinned, patched headers; ``check_abi()`` compares
their sizes with what the library was compiled with, so a mismatch fails
loudly at load time instead of corrupting memory.
"""

from __future__ import annotations

import ctypes as C

from .. import options
from ..errors import NativeLibraryError
from .lib import load

llama_token = C.c_int32
llama_pos = C.c_int32
llama_seq_id = C.c_int32
p_model = C.c_void_p
p_ctx = C.c_void_p
p_vocab = C.c_void_p
p_sampler = C.c_void_p
p_mtp = C.c_void_p

LLAMA_CONTEXT_TYPE_DEFAULT = 0
LLAMA_CONTEXT_TYPE_MTP = 1
LLAMA_DEFAULT_SEED = 0xFFFFFFFF
MTP_MAX_DRAFT = options.MAX_DRAFT               # the per-position arrays of llama_mtp_stats

DRAFT_MODES = options.NATIVE_DRAFT_MODES          # name -> llama_mtp_draft_mode

MTP_OK = 0
MTP_ERR_CTX_FULL = -1
MTP_ERR_DECODE = -2
MTP_ERR_ARG = -3
MTP_ERR_STATE = -4

log_callback = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)
progress_callback = C.CFUNCTYPE(C.c_bool, C.c_float, C.c_void_p)


class llama_model_params(C.Structure):
    _fields_ = [
        ("devices", C.c_void_p),
        ("tensor_buft_overrides", C.c_void_p),
        ("n_gpu_layers", C.c_int32),
        ("split_mode", C.c_int),
        ("load_mode", C.c_int),
        ("lazy_mode", C.c_int),
        ("main_gpu", C.c_int32),
        ("tensor_split", C.POINTER(C.c_float)),
        ("progress_callback", progress_callback),
        ("progress_callback_user_data", C.c_void_p),
        ("kv_overrides", C.c_void_p),
        ("vocab_only", C.c_bool),
        ("check_tensors", C.c_bool),
        ("use_extra_bufts", C.c_bool),
        ("no_host", C.c_bool),
        ("no_alloc", C.c_bool),
        ("load_mtp", C.c_bool),
    ]


class llama_context_params(C.Structure):
    _fields_ = [
        ("n_ctx", C.c_uint32),
        ("n_batch", C.c_uint32),
        ("n_ubatch", C.c_uint32),
        ("n_seq_max", C.c_uint32),
        ("n_rs_seq", C.c_uint32),
        ("n_outputs_max", C.c_uint32),
        ("n_outputs_max_per_seq", C.c_uint32),
        ("n_threads", C.c_int32),
        ("n_threads_batch", C.c_int32),
        ("ctx_type", C.c_int),
        ("rope_scaling_type", C.c_int),
        ("pooling_type", C.c_int),
        ("attention_type", C.c_int),
        ("flash_attn_type", C.c_int),
        ("rope_freq_base", C.c_float),
        ("rope_freq_scale", C.c_float),
        ("yarn_ext_factor", C.c_float),
        ("yarn_attn_factor", C.c_float),
        ("yarn_beta_fast", C.c_float),
        ("yarn_beta_slow", C.c_float),
        ("yarn_orig_ctx", C.c_uint32),
        ("defrag_thold", C.c_float),
        ("cb_eval", C.c_void_p),
        ("cb_eval_user_data", C.c_void_p),
        ("type_k", C.c_int),
        ("type_v", C.c_int),
        ("abort_callback", C.c_void_p),
        ("abort_callback_data", C.c_void_p),
        ("embeddings", C.c_bool),
        ("offload_kqv", C.c_bool),
        ("no_perf", C.c_bool),
        ("op_offload", C.c_bool),
        ("swa_full", C.c_bool),
        ("kv_unified", C.c_bool),
        ("samplers", C.c_void_p),
        ("n_samplers", C.c_size_t),
        ("ctx_other", C.c_void_p),
    ]


class llama_batch(C.Structure):
    _fields_ = [
        ("n_tokens", C.c_int32),
        ("token", C.POINTER(llama_token)),
        ("embd", C.POINTER(C.c_float)),
        ("pos", C.POINTER(llama_pos)),
        ("n_seq_id", C.POINTER(C.c_int32)),
        ("seq_id", C.POINTER(C.POINTER(llama_seq_id))),
        ("logits", C.POINTER(C.c_int8)),
    ]


class llama_sampler_chain_params(C.Structure):
    _fields_ = [("no_perf", C.c_bool)]


class llama_mtp_params(C.Structure):
    _fields_ = [
        ("n_draft", C.c_int32),
        ("n_batch", C.c_int32),
        ("seq_id", llama_seq_id),
    ]


class llama_mtp_stats(C.Structure):
    _fields_ = [
        ("n_prompt", C.c_int64),
        ("n_reused", C.c_int64),
        ("n_generated", C.c_int64),
        ("n_steps", C.c_int64),
        ("n_drafted", C.c_int64),
        ("n_accepted", C.c_int64),
        ("n_draft_decodes", C.c_int64),
        ("n_catchup_decodes", C.c_int64),
        ("drafted_per_pos", C.c_int64 * MTP_MAX_DRAFT),
        ("accepted_per_pos", C.c_int64 * MTP_MAX_DRAFT),
        ("t_prefill_ms", C.c_double),
        ("t_draft_ms", C.c_double),
        ("t_verify_ms", C.c_double),
        ("t_sample_ms", C.c_double),
        ("t_catchup_ms", C.c_double),
    ]


class llama_mtp_adaptive_stats(C.Structure):
    _fields_ = [
        ("k_max", C.c_int32),
        ("load", C.c_int32),
        ("steps_per_k", C.c_int64 * (MTP_MAX_DRAFT + 1)),
        ("n_probes", C.c_int64),
        ("n_cut", C.c_int64),
        ("n_extended", C.c_int64),
        ("n_deferred", C.c_int64),
        ("t_draft_ms", C.c_double),
        ("t_overhead_ms", C.c_double),
        ("t_switch_ms", C.c_double),
        ("t_target_ms", C.c_double * (MTP_MAX_DRAFT + 1)),
        ("accept", C.c_float * MTP_MAX_DRAFT),
        ("k_best", C.c_int32),
        ("speedup", C.c_double),
        ("realized_plain", C.c_double),
        ("realized_draft", C.c_double),
        ("n_vetoed", C.c_int64),
        ("n_dormant", C.c_int64),
        ("n_blocks_ended", C.c_int64),
    ]


# name: (restype, argtypes)
_SIGNATURES = {
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [log_callback, C.c_void_p]),
    "llama_model_default_params": (llama_model_params, []),
    "llama_context_default_params": (llama_context_params, []),
    "llama_sampler_chain_default_params": (llama_sampler_chain_params, []),
    "llama_model_load_from_file": (p_model, [C.c_char_p, llama_model_params]),
    # pymtp (llama-mtp.h): a model plus a head-only GGUF with its MTP layer(s)
    "llama_model_load_from_file_with_mtp_head": (p_model, [C.c_char_p, C.c_char_p, llama_model_params]),
    "llama_model_free": (None, [p_model]),
    "llama_init_from_model": (p_ctx, [p_model, llama_context_params]),
    "llama_free": (None, [p_ctx]),
    "llama_n_ctx": (C.c_uint32, [p_ctx]),
    "llama_decode": (C.c_int32, [p_ctx, llama_batch]),
    "llama_get_logits_ith": (C.POINTER(C.c_float), [p_ctx, C.c_int32]),
    "llama_model_n_embd": (C.c_int32, [p_model]),
    "llama_get_memory": (C.c_void_p, [p_ctx]),
    "llama_memory_seq_rm": (C.c_bool, [C.c_void_p, llama_seq_id, llama_pos, llama_pos]),
    "llama_n_batch": (C.c_uint32, [p_ctx]),
    "llama_n_rs_seq": (C.c_uint32, [p_ctx]),
    "llama_model_is_recurrent": (C.c_bool, [p_model]),
    "llama_model_is_hybrid": (C.c_bool, [p_model]),
    "llama_model_get_vocab": (p_vocab, [p_model]),
    "llama_model_n_layer_nextn": (C.c_int32, [p_model]),
    "llama_model_n_ctx_train": (C.c_int32, [p_model]),
    "llama_model_meta_val_str": (C.c_int32, [p_model, C.c_char_p, C.c_char_p, C.c_size_t]),
    "llama_model_desc": (C.c_int32, [p_model, C.c_char_p, C.c_size_t]),
    "llama_model_size": (C.c_uint64, [p_model]),
    "llama_model_n_params": (C.c_uint64, [p_model]),
    "llama_model_chat_template": (C.c_char_p, [p_model, C.c_char_p]),
    "llama_vocab_n_tokens": (C.c_int32, [p_vocab]),
    "llama_vocab_is_eog": (C.c_bool, [p_vocab, llama_token]),
    "llama_vocab_bos": (llama_token, [p_vocab]),
    "llama_vocab_eos": (llama_token, [p_vocab]),
    "llama_vocab_get_add_bos": (C.c_bool, [p_vocab]),
    "llama_tokenize": (C.c_int32, [p_vocab, C.c_char_p, C.c_int32, C.POINTER(llama_token), C.c_int32,
                                   C.c_bool, C.c_bool]),
    "llama_token_to_piece": (C.c_int32, [p_vocab, llama_token, C.c_char_p, C.c_int32, C.c_int32, C.c_bool]),
    "llama_sampler_chain_init": (p_sampler, [llama_sampler_chain_params]),
    "llama_sampler_chain_add": (None, [p_sampler, p_sampler]),
    "llama_sampler_free": (None, [p_sampler]),
    "llama_sampler_init_greedy": (p_sampler, []),
    "llama_sampler_init_dist": (p_sampler, [C.c_uint32]),
    "llama_sampler_init_top_k": (p_sampler, [C.c_int32]),
    "llama_sampler_init_top_p": (p_sampler, [C.c_float, C.c_size_t]),
    "llama_sampler_init_min_p": (p_sampler, [C.c_float, C.c_size_t]),
    "llama_sampler_init_temp": (p_sampler, [C.c_float]),
    "llama_sampler_init_penalties": (p_sampler, [C.c_int32, C.c_int32, C.c_float, C.c_float, C.c_float]),
    # patch 0001: MTP hooks in the C API
    "llama_set_embeddings_nextn": (None, [p_ctx, C.c_bool, C.c_bool]),
    "llama_set_nextn_layer_offset": (None, [p_ctx, C.c_int32]),
    "llama_get_embeddings_nextn": (C.POINTER(C.c_float), [p_ctx]),
    "llama_get_embeddings_nextn_ith": (C.POINTER(C.c_float), [p_ctx, C.c_int32]),
    # the MTP engine (native/include/llama-mtp.h)
    "llama_mtp_default_params": (llama_mtp_params, []),
    "llama_mtp_init": (p_mtp, [p_ctx, p_ctx, llama_mtp_params]),
    "llama_mtp_free": (None, [p_mtp]),
    "llama_mtp_prefill": (C.c_int32, [p_mtp, C.POINTER(llama_token), C.c_int32]),
    "llama_mtp_step": (C.c_int32, [p_mtp, p_sampler, C.c_int32, C.POINTER(llama_token), C.c_int32]),
    "llama_mtp_set_target_sampling": (None, [p_mtp, p_sampler, C.c_bool]),
    "llama_mtp_step_logprobs": (C.c_int32, [p_mtp, C.c_int32, C.c_int32, C.POINTER(C.c_float),
                                            C.POINTER(llama_token), C.POINTER(C.c_float)]),
    "llama_mtp_set_draft_mode": (None, [p_mtp, C.c_int, C.c_uint32]),
    "llama_mtp_clear": (None, [p_mtp]),
    "llama_mtp_set_synthetic_rates": (C.c_int32, [p_mtp, C.POINTER(C.c_float), C.c_int32]),
    "llama_mtp_pin_adaptive_costs": (None, [p_mtp, C.c_double, C.c_double, C.c_double]),  # tests only
    "llama_mtp_time_draft": (None, [p_mtp, C.c_double]),  # tests only
    "llama_mtp_pin_adaptive_target_costs": (None, [p_mtp, C.POINTER(C.c_double), C.c_int32, C.c_double]),  # tests only
    "llama_mtp_set_realized_rates": (None, [p_mtp, C.c_double, C.c_double]),  # tests only
    "llama_mtp_set_realized_share": (None, [p_mtp, C.c_double]),  # tests only
    "llama_mtp_warmed_sizes": (C.c_int32, [p_mtp]),  # tests only
    "llama_mtp_warmed_sampling": (C.c_int32, [p_mtp]),  # tests only
    "llama_mtp_target_sampling": (C.c_int32, [p_mtp]),  # tests only
    "llama_mtp_n_past": (C.c_int32, [p_mtp]),
    "llama_mtp_has_draft": (C.c_bool, [p_mtp]),
    "llama_mtp_max_draft": (C.c_int32, [p_mtp]),
    "llama_mtp_get_stats": (None, [p_mtp, C.POINTER(llama_mtp_stats)]),
    "llama_mtp_reset_stats": (None, [p_mtp]),
    "llama_mtp_abi_sizeof": (C.c_size_t, [C.c_int32]),
    # draft vocabularies for models with their own MTP layers (native/models/draft-vocab.cpp)
    "llama_mtp_draft_vocab_arch": (C.c_bool, [C.c_char_p]),
    # the adaptive draft controller (native/engine/mtp-adaptive.cpp)
    "llama_mtp_adaptive_default_max": (C.c_int32, []),
    "llama_mtp_set_adaptive": (None, [p_mtp, C.c_int32]),
    "llama_mtp_get_adaptive_stats": (None, [p_mtp, C.POINTER(llama_mtp_adaptive_stats)]),
    "llama_mtp_share_costs": (None, [p_mtp, p_mtp]),
    # multi-head drafting
    "llama_mtp_set_heads": (C.c_int32, [p_mtp, C.POINTER(p_ctx), C.c_int32]),
    "llama_mtp_set_head_policy": (None, [p_mtp, C.c_int]),
    "llama_mtp_n_heads": (C.c_int32, [p_mtp]),
    # parallel drafting heads
    "llama_mtp_parallel": (C.c_int32, [p_mtp]),
    "llama_model_mtp_parallel": (C.c_int32, [p_model, C.c_int32, C.POINTER(C.c_float)]),
    "llama_mtp_peek_draft": (C.c_int32, [p_mtp, llama_token, C.c_int32, C.POINTER(llama_token), C.POINTER(C.c_float)]),
    # caller-decoded targets (llama-server's path; tests drive it directly)
    "llama_mtp_observe": (C.c_int32, [p_mtp, C.POINTER(llama_token), C.c_int32, llama_pos, C.c_int32]),
    "llama_mtp_draft": (C.c_int32, [p_mtp, C.c_void_p, llama_token, llama_pos, C.c_int32, C.POINTER(llama_token)]),
    # the engine's option vocabulary (pymtp/options.py mirrors it; tests/engine/test_options.py checks)
    "llama_mtp_draft_limit": (C.c_int32, []),
    "llama_mtp_draft_mode_name": (C.c_char_p, [C.c_int32]),
    "llama_mtp_draft_mode_from_name": (C.c_int32, [C.c_char_p]),
    "llama_mtp_draft_mode_auto": (C.c_int, [C.c_float, C.c_bool]),
    "llama_mtp_head_policy_name": (C.c_char_p, [C.c_int32]),
    "llama_mtp_head_policy_from_name": (C.c_int32, [C.c_char_p]),
    "llama_mtp_draft_choices": (C.c_char_p, []),
    "llama_mtp_head_policy_choices": (C.c_char_p, []),
}


class _Lib:
    """Attribute access to the typed functions of the loaded library."""

    def __init__(self) -> None:
        dll = load()
        for name, (res, args) in _SIGNATURES.items():
            try:
                fn = getattr(dll, name)
            except AttributeError as e:
                raise NativeLibraryError(
                    f"{name} is missing from the native library: it was not built from pymtp's patched "
                    "llama.cpp (reinstall with 'pip install .')") from e
            fn.restype = res
            fn.argtypes = args
            setattr(self, name, fn)
        self.check_abi()
        self._log_cb = log_callback(_quiet_log)
        self.llama_log_set(self._log_cb, None)
        self.llama_backend_init()

    def check_abi(self) -> None:
        for which, struct in enumerate((llama_mtp_params, llama_mtp_stats, llama_model_params, llama_context_params,
                                        llama_mtp_adaptive_stats)):
            native = self.llama_mtp_abi_sizeof(which)
            if native != C.sizeof(struct):
                raise NativeLibraryError(
                    f"ABI mismatch for {struct.__name__}: library {native} bytes, bindings {C.sizeof(struct)}")


_verbose = False
_log_tail: list[str] = []


def _quiet_log(level: int, text: bytes, _ud) -> None:
    msg = text.decode("utf-8", "replace") if text else ""
    if _verbose:
        import sys
        sys.stderr.write(msg)
    # keep the last lines: they explain a failed load
    _log_tail.append(msg)
    del _log_tail[:-40]


def set_verbose(value: bool) -> None:
    global _verbose
    _verbose = value


def clear_log_tail() -> None:
    """Forget the log lines kept so far (call before an operation whose failure last_log_lines explains)."""
    del _log_tail[:]


def last_log_lines(n: int = 6) -> str:
    lines = "".join(_log_tail).strip().splitlines()
    errors = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return "\n".join((errors or lines)[-n:])


_lib: _Lib | None = None


def lib() -> _Lib:
    global _lib
    if _lib is None:
        _lib = _Lib()
    return _lib
