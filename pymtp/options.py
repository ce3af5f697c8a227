"""pymtp's option vocabulary, defined once: MTP modes, draft modes, head policies, draft lengths.

Every other Python place derives from this module: ``pymtp.Model`` / ``RuntimeConfig``
validation, the CLI's choices and help (generate, chat, bench, serve), the server launcher and
the ctypes bindings. Pure Python (no ctypes, no native library): the launcher and the CLI's
parsers use it without loading libllama.

The native values mirror the engine's C enums (``llama_mtp_draft_mode``,
``llama_mtp_head_policy``) and its draft cap, and stay plain dicts / ints so that a test can
compare them with what the library exports. A draft length (``n_draft``: "auto" or a number) is
parsed once into a ``DraftLength`` where it comes in, and travels typed down to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError

# --------------------------------------------------------------------------- MTP on / off

MTP_AUTO = "auto"             # MTP when the model has it (a head's included), plain decoding otherwise
MTP_MODES = (MTP_AUTO, "on", "off")
DEFAULT_MTP = MTP_AUTO
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
N_DRAFT_AUTO = "auto"         # what users type for the adaptive controller (DraftLength.parse)
ADAPTIVE_MAX_DRAFT = 7        # llama_mtp_adaptive_default_max(): the most an "auto" step drafts
DEFAULT_N_DRAFT = N_DRAFT_AUTO
FIXED_N_DRAFT = 3             # the fixed length the engine's C defaults use (llama_mtp_default_params)


@dataclass(frozen=True)
class DraftLength:
    """How many tokens a step drafts: the adaptive controller's choice each step, 0..``cap``
    (``n_draft="auto"``), or a fixed ``cap`` every step (``n_draft=K``).

    Parsed once where a user's value comes in (``DraftLength.parse``: the CLI's ``--n-draft``,
    ``pymtp.Model(n_draft=...)``, ``pymtp.llama_cpp.Llama(n_draft=...)``, the server launcher) and
    handed down as is; ``str()`` gives it back as users type it, ``value`` as the stats and JSON
    report it ("auto" or the number)."""

    adaptive: bool
    cap: int   # the most tokens one step drafts (adaptive: ADAPTIVE_MAX_DRAFT)

    def __post_init__(self) -> None:
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or not 0 <= self.cap <= MAX_DRAFT:
            raise InvalidArgumentError(f"a draft length is 0..{MAX_DRAFT}, got {self.cap!r}")
        if self.adaptive and self.cap != ADAPTIVE_MAX_DRAFT:
            raise InvalidArgumentError(f"the adaptive controller drafts up to {ADAPTIVE_MAX_DRAFT}, got cap {self.cap}")

    @classmethod
    def auto(cls) -> "DraftLength":
        return cls(adaptive=True, cap=ADAPTIVE_MAX_DRAFT)

    @classmethod
    def fixed(cls, k: int) -> "DraftLength":
        return cls(adaptive=False, cap=k)

    @classmethod
    def parse(cls, value: "DraftLength | int | str") -> "DraftLength":
        """``"auto"`` or a fixed draft length 0..MAX_DRAFT (an int or its text; a DraftLength is
        returned as is); InvalidArgumentError (a ValueError) otherwise."""
        if isinstance(value, DraftLength):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text == N_DRAFT_AUTO:
                return cls.auto()
            try:
                value = int(text)
            except ValueError:
                pass   # reported as given
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DRAFT:
            raise InvalidArgumentError(f"n_draft must be 'auto' or a number 0..{MAX_DRAFT}, got {value!r}")
        return cls.fixed(value)

    @property
    def value(self) -> "int | str":
        """``"auto"`` or the fixed length: what the stats' ``n_draft`` and the JSON outputs hold."""
        return N_DRAFT_AUTO if self.adaptive else self.cap

    def __str__(self) -> str:
        return str(self.value)


DEFAULT_DRAFT_LENGTH = DraftLength.parse(DEFAULT_N_DRAFT)


# --------------------------------------------------------------------------- one-line help texts

def _pairs(helps: dict) -> list[str]:
    return [f"{name} = {text}" for name, text in helps.items()]


MTP_HELP = "multi-token prediction: " + ", ".join(_pairs(MTP_MODE_HELP))
DRAFT_HELP = "how drafts are made and checked: " + "; ".join(_pairs(DRAFT_MODE_HELP))
HEADS_HELP = "models with several MTP layers: " + ", ".join(_pairs(HEAD_POLICY_HELP))
N_DRAFT_HELP = (f"tokens drafted per step by the MTP head: 'auto' (each step drafts 0..{ADAPTIVE_MAX_DRAFT}, "
                "as many as the engine measures to pay on this machine and text; plain decoding where "
                f"drafting does not pay) or a fixed 0..{MAX_DRAFT}")
