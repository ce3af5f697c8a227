"""pymtp's option vocabulary, defined once: MTP modes, draft modes, head policies, draft limits.

Every other Python place derives from this module: ``pymtp.Model`` / ``RuntimeConfig``
validation, the CLI's choices and help (generate, chat, bench, serve), the server launcher and
the ctypes bindings. Pure Python (no ctypes, no native library): the launcher and the CLI's
parsers use it without loading libllama.

The native values mirror the engine's C enums (``llama_mtp_draft_mode``,
``llama_mtp_head_policy``) and its draft cap, and stay plain dicts / ints so that a test can
compare them with what the library exports.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- MTP on / off

MTP_MODES = ("auto", "on", "off")
DEFAULT_MTP = "auto"
MTP_MODE_HELP = {
    "auto": "use it when the model has MTP layers (its own or a head's)",
    "on": "fail if it has none",
    "off": "plain decoding",
}

# --------------------------------------------------------------------------- draft modes

# name -> llama_mtp_draft_mode (the value the engine takes)
DRAFT_MODES = {"greedy": 0, "chain": 1, "stochastic": 2}
# tests only: the engine accepts every draft (the output is not the model's); never a user choice
TEST_DRAFT_MODES = {"test-accept-all": 100}
NATIVE_DRAFT_MODES = {**DRAFT_MODES, **TEST_DRAFT_MODES}
DRAFT_AUTO = "auto"           # resolved per request from the sampling settings (engine/sampling.py)
DRAFT_CHOICES = (DRAFT_AUTO, *DRAFT_MODES)   # what users may pass: draft=, --draft, "mtp_draft"
DEFAULT_DRAFT = DRAFT_AUTO
DRAFT_MODE_HELP = {
    "greedy": "argmax of the MTP head",
    "chain": "top token of your sampler chain on the MTP logits",
    "stochastic": "a draw from it, verified by rejection sampling (exact, keeps the speedup at temperature > 0)",
    "auto": "stochastic at temperature > 0, else greedy/chain",
}

# --------------------------------------------------------------------------- several MTP layers

# name -> llama_mtp_head_policy: which MTP layer drafts each step of a model with several
HEAD_POLICIES = {"per_layer": 0, "first": 1, "capped": 2}
DEFAULT_HEADS = "per_layer"
HEAD_POLICY_HELP = {
    "per_layer": "draft step i with layer i mod n (each layer predicts its own distance; "
                 "--n-draft may exceed n)",
    "first": "layer 0 at every step",
    "capped": "step i with layer i and at most n drafts (upstream llama.cpp)",
}

# --------------------------------------------------------------------------- draft length

MAX_DRAFT = 16                # the engine's cap on tokens drafted per step
N_DRAFT_AUTO = "auto"         # the adaptive controller chooses 0..ADAPTIVE_MAX_DRAFT each step
ADAPTIVE_MAX_DRAFT = 7        # llama_mtp_adaptive_default_max(): the most an "auto" step drafts
DEFAULT_N_DRAFT = N_DRAFT_AUTO
FIXED_N_DRAFT = 3             # the fixed length the engine's C defaults use (llama_mtp_default_params)


def parse_n_draft(value: int | str) -> int | str:
    """``"auto"`` or a fixed draft length 0..MAX_DRAFT (an int or its text); ValueError otherwise."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == N_DRAFT_AUTO:
            return N_DRAFT_AUTO
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"n_draft must be 'auto' or a number 0..{MAX_DRAFT}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DRAFT:
        raise ValueError(f"n_draft must be 'auto' or a number 0..{MAX_DRAFT}, got {value!r}")
    return value


def draft_cap(n_draft: int | str) -> int:
    """The most tokens a step may draft under this setting."""
    return ADAPTIVE_MAX_DRAFT if n_draft == N_DRAFT_AUTO else int(n_draft)


# --------------------------------------------------------------------------- one-line help texts

def _pairs(helps: dict) -> list[str]:
    return [f"{name} = {text}" for name, text in helps.items()]


MTP_HELP = "multi-token prediction: " + ", ".join(_pairs(MTP_MODE_HELP))
DRAFT_HELP = "how drafts are made and checked: " + "; ".join(_pairs(DRAFT_MODE_HELP))
HEADS_HELP = "models with several MTP layers: " + ", ".join(_pairs(HEAD_POLICY_HELP))
N_DRAFT_HELP = (f"tokens drafted per step by the MTP head: 'auto' (each step drafts 0..{ADAPTIVE_MAX_DRAFT}, "
                "as many as the engine measures to pay on this machine and text; plain decoding where "
                f"drafting does not pay) or a fixed 0..{MAX_DRAFT}")
