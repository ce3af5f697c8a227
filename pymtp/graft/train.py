"""Train an MTP head by self-distillation and write it as a head-only GGUF.

Per batch of sequences x_0..x_T (all starting at position 0, right-padded):
  H = the frozen trunk's final-norm hidden states (cached for the whole data set when it fits);
  pass 0 (teacher-forced, what the MTP KV cache holds): MTP position p sees (x_p, H_{p-1}),
      H_{-1} = 0, and learns the base's next-token distribution at p:
      KL(softmax(LM(H_p)) || softmax(LM(out_p)));
  pass s = 1..chain-1 (draft step s+1 at inference): position p sees (x_p, out^{s-1}_{p-1}) - the
      head's own previous output - attending to pass 0's keys at <= p-s and the chain's own keys,
      exactly like the MTP KV cache while drafting; same target, loss weight chain_weight^s.
The loss covers the positions drafts are made at (the generated part of each sequence, all of a
corpus text; --loss-positions all: every position), optionally + ce_weight * CE(actual next
token). Only the head trains (AdamW, warmup + cosine, grad clip, bf16 autocast on CUDA with the
teacher in fp32/TF32). Validation: top-1 agreement (head argmax == base argmax) per draft step
on held-out sequences, at the drafted positions (agree) and at every position (agree_all).

Several heads (--heads N > 1; the convention the native engine uses, native/models/dense-mtp.cpp
with llama_set_nextn_layer_offset(ctx, j)): head j is its own MTP block, stored at
blk.{n_layer + j}. Head j's entry at position p pairs token x_p with g_{j-1}(p-1), where
g_{-1} = the trunk's h (h_{p-1} above) and g_j(q) = head j's output hidden state at q
(out = RMSNorm(z) * shared_head_norm, which llama.cpp exposes as h_nextn and which feeds the
next draft step). Head j at position p predicts x_{p+1}; each head attends causally over its own
sequence of entries (its own KV cache). Draft step j of the engine runs head j on
(d_j, g_{j-1}) of the previous step, so head j only sees trunk information up to p-1-j.
Training is teacher-forced over whole sequences, one pass per head (the --chain unroll with
pass j run by head j over its own keys): pass 0 = head 0 on (x_p, H_{p-1}); pass j = head j on
(x_p, out^{j-1}_{p-1}) with causal attention over pass j's own positions. Every head's target is
the trunk's distribution at p (the token x_{p+1}); loss weight chain_weight^j, gradients flow
down the chain (head j's loss also trains heads < j through their outputs), positions p >= j.
Heads j >= 1 start from the same --init recipe as head 0 (noise seeded seed + j). Validation
reports top-1 agreement with the trunk per head (per_step[j] = head j).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pymtp.errors import PymtpError

from .data import GenConfig, corpus_dataset, default_cache_dir, generate_dataset, held_out_prompts
from .dataset import Dataset
from .gguf_weights import load_base
from .torch_model import BaseModel, MTPHead, feature_layers, rope_tables
from .writer import copy_gguf, write_head_gguf

CKPT_VERSION = 1
# How a later draft step's (or parallel entry's) loss is weighted against the first one's:
#   geometric:  chain_weight^s, the same at every position;
#   acceptance: at each position, the chance that the earlier steps' drafts there are all accepted,
#               prod_{j<s} (1 - TV(base_j, head_j)) (detached; 1 - TV is a draft's acceptance chance at
#               temperature 1). A step's capacity then goes where its draft can count: a draft after a
#               rejected one is discarded whatever it is.
STEP_WEIGHTS = ("geometric", "acceptance")
BF16_TRUNK_PARAMS = 4e9          # larger bases run their (frozen) trunk in bf16 on CUDA


DEVICE_AUTO = "auto"   # --device's default: CUDA when PyTorch sees a device, else the CPU


@dataclass
class TrainConfig:
    steps: int = 6000
    batch: int = 16
    seq_len: int = 512
    lr: float = 1e-3
    min_lr_frac: float = 0.1
    warmup: int = -1                  # -1: min(200, steps // 20)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    device: str = DEVICE_AUTO
    chain: int = 2                    # draft steps trained (1 = teacher-forced only)
    chain_weight: float = 0.5         # loss weight of draft step s+1 relative to step s (step_weights "geometric")
    step_weights: str = "geometric"   # later draft steps' loss weights: see STEP_WEIGHTS
    ce_weight: float = 0.0            # + CE on the actual next token
    init: str = "mix"
    eval_every: int = -1              # -1: steps // 10
    save_every: int = -1              # -1: steps // 20 (and at least every 10 minutes)
    val_tokens: int = 65536           # cap on validation tokens
    cache_gb: float = 8.0             # cache trunk hidden states (fp16, host memory) up to this size
    loss_chunk: int = 4096            # rows per LM-head chunk in the loss
    threads: int = 0                  # CPU threads for torch (0: torch's default)
    loss_positions: str = "generated"  # "generated": where drafts are made (corpus: all); "all"
    heads: int = 1                    # chained MTP heads trained and written (1: one head, --chain)
    parallel: int = 0                 # K >= 2: a parallel head, K drafts in one pass (0: sequential)
    features: bool = True             # fuse h with trunk features (EAGLE-3-style; torch_model.feature_layers)
    init_head: str = ""               # start from this head GGUF's weights (""; the base's last layer)


@dataclass
class GraftJob:
    base: Path
    out: Path
    train: TrainConfig = field(default_factory=TrainConfig)
    gen: GenConfig = field(default_factory=GenConfig)
    corpus: list = field(default_factory=list)
    head_type: str = "f16"
    resume: bool = False
    report: Path | None = None
    data_cache: Path | None = None
    gen_batch: int = 0                # 0: 32 on CPU, 256 on CUDA
    progress: bool = True
    tokenizer: object = None          # an open Tokenizer (the CLI opens it before torch loads)
    check_prompts: int = 24           # held-out prompts the written head is measured on (0: none)
    draft_vocab: int = 0              # > 0: trim the head to this many tokens (pymtp.graft.trim)
    check_tokens: int = 128           # tokens generated per prompt for that

    @property
    def ckpt_path(self) -> Path:
        return self.out.with_name(self.out.name + ".ckpt.pt")


def pick_device(name: str) -> torch.device:
    if name == DEVICE_AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PymtpError("--device cuda: PyTorch sees no CUDA device (torch.cuda.is_available() is False)")
    if name not in ("cpu", "cuda"):
        raise PymtpError(f"--device must be cpu, cuda or auto (got {name!r})")
    return torch.device(name)


def lr_at(step: int, cfg: TrainConfig) -> float:
    warm = cfg.warmup if cfg.warmup >= 0 else min(200, cfg.steps // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    t = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


# --------------------------------------------------------------------------- hidden states

class Hiddens:
    """Trunk final-norm hidden states of the (truncated) sequences, followed by the trunk features of
    ``taps`` (a feature head's input): cached (fp16, host memory) or computed per batch. The trunk
    runs in its own dtype (float32, TF32 matmuls on CUDA, for models up to BF16_TRUNK_PARAMS
    parameters; bf16 above), never under autocast."""

    def __init__(self, base: BaseModel, data: Dataset, seq_len: int, cache_gb: float, device,
                 progress: bool, log=print, loss_positions: str = "generated", taps: tuple = ()):
        self.base, self.data, self.seq_len, self.device, self.taps = base, data, seq_len, device, tuple(taps)
        self.width = base.hp.n_embd * (1 + len(self.taps))
        lens = np.minimum(data.lengths(), seq_len)
        self.lens = lens
        # first position of the loss (where drafts are made: the generated part; corpus: all)
        self.start = np.zeros(len(data), dtype=np.int64)
        if loss_positions == "generated":
            self.start = np.where(data.source == 0, data.n_prompt, 0).astype(np.int64)
        need = float(lens.sum()) * self.width * 2 / 1e9
        self.cache = None
        if need <= cache_gb:
            self.offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            self.cache = torch.empty(int(lens.sum()), self.width, dtype=torch.float16,
                                     pin_memory=device.type == "cuda")
            self._fill(progress, log)
        else:
            log(f"hidden states need {need:.1f} GB > --cache-gb {cache_gb:g}: computing them per batch")

    def _fill(self, progress, log):
        order = np.argsort(-self.lens, kind="stable")
        budget = 16384 if self.device.type == "cuda" else 2048     # tokens per trunk batch
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=int(self.lens.sum()), desc="trunk hiddens", unit="tok", dynamic_ncols=True)
        i = 0
        while i < len(order):
            T = int(self.lens[order[i]])
            n = max(1, budget // max(T, 1))
            idx = order[i:i + n]
            x = self.tokens(idx)
            with torch.no_grad():
                h = self.base(x, self.taps).to("cpu", torch.float16)
            for j, s in enumerate(idx):
                L = int(self.lens[s])
                self.cache[self.offsets[s]:self.offsets[s] + L] = h[j, :L]
            if bar is not None:
                bar.update(int(self.lens[idx].sum()))
            i += n
        if bar is not None:
            bar.close()

    def tokens(self, idx) -> torch.Tensor:
        T = int(self.lens[idx].max())
        x = torch.zeros(len(idx), T, dtype=torch.long)
        for j, s in enumerate(idx):
            seq = self.data.seq(int(s))[: self.lens[s]]
            x[j, :len(seq)] = torch.from_numpy(seq.astype(np.int64))
        return x.to(self.device)

    def has_loss(self, idx) -> np.ndarray:
        return np.asarray(idx)[self.start[idx] < self.lens[idx]]

    def batch(self, idx):
        """(tokens [B, T], valid [B, T], loss positions [B, T], hidden [B, T, D * (1 + taps)]) on the
        device."""
        x = self.tokens(idx)
        B, T = x.shape
        lens = torch.as_tensor(self.lens[idx], device=self.device)
        start = torch.as_tensor(self.start[idx], device=self.device)
        pos = torch.arange(T, device=self.device)[None, :]
        mask = pos < lens[:, None]
        lmask = mask & (pos >= start[:, None])
        if self.cache is None:
            with torch.no_grad():
                h = self.base(x, self.taps)
        else:
            h = torch.zeros(B, T, self.width, dtype=torch.float16, pin_memory=self.device.type == "cuda")
            for j, s in enumerate(idx):
                L = int(self.lens[s])
                h[j, :L] = self.cache[self.offsets[s]:self.offsets[s] + L]
            h = h.to(self.device, non_blocking=True).to(self.base.dtype)
        return x, mask, lmask, h


# --------------------------------------------------------------------------- loss

class Distiller:
    """Head passes + KL/CE against the base's own next-token distribution."""

    def __init__(self, base: BaseModel, head, cfg: TrainConfig, device, autocast, vocab_ids=None):
        """head: one MTPHead (trained over cfg.chain draft steps) or an nn.ModuleList of chained
        heads (pass j = head j, see the module docstring). vocab_ids: the head's draft vocabulary,
        if it has one; teacher and student are then scored on those tokens only (the teacher's
        distribution renormalised there, the best a head limited to them can match), which also
        makes each step's LM-head work N/n_vocab of the whole."""
        if cfg.step_weights not in STEP_WEIGHTS:
            raise ValueError(f"unknown step weights {cfg.step_weights!r}; expected one of {STEP_WEIGHTS}")
        self.base, self.head, self.cfg, self.device, self.autocast = base, head, cfg, device, autocast
        self.rows = base.output_rows(vocab_ids) if vocab_ids is not None else None
        self.heads = list(head) if isinstance(head, torch.nn.ModuleList) else None
        hp = base.hp
        self.parallel = 0 if self.heads else head.parallel
        self.head0 = self.heads[0] if self.heads else head   # fed the trunk's rows (a feature head fuses them)
        pos = torch.arange(cfg.seq_len + max(self.parallel, 1), device=device)
        # the MTP block is a global-attention layer with the model's (global) rope
        self.cos, self.sin = rope_tables(pos, hp.n_rot, hp.rope_base, hp.rope_freq_scale, base.rope_freqs)
        self.use_ckpt = device.type == "cuda"

    def _chunk_loss(self, o, h, tgt):
        """Per-row KL(teacher || student), CE, top-1 agreement and acceptance chance 1 - TV (detached;
        computed for the acceptance step weights only, else 1) of one chunk of rows."""
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
            # the teacher in full precision (TF32 on CUDA), the student under autocast
            t_logp = torch.log_softmax(self.base.logits(h.to(self.base.output.dtype), self.rows).float(), dim=-1)
            t_arg = t_logp.argmax(-1)
        s_logp = torch.log_softmax(self.base.logits(o, self.rows).float(), dim=-1)
        kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1)
        if self.cfg.ce_weight:
            ce = F.nll_loss(s_logp, tgt.clamp(min=0), reduction="none") * (tgt >= 0)
        else:
            ce = torch.zeros_like(kl)
        with torch.no_grad():
            s_lp = s_logp.detach()
            agree = s_lp.argmax(-1) == t_arg
            # (a full-vocabulary pass over the rows: only where the acceptance weights use it, else 1)
            if self.cfg.step_weights == "acceptance":
                keep = torch.minimum(t_logp, s_lp).exp().sum(-1)
            else:
                keep = torch.ones_like(kl)
        return kl, ce, agree, keep

    def _loss_rows(self, o, h, tgt):
        parts = []
        for i in range(0, o.shape[0], self.cfg.loss_chunk):
            args = (o[i:i + self.cfg.loss_chunk], h[i:i + self.cfg.loss_chunk], tgt[i:i + self.cfg.loss_chunk])
            if self.use_ckpt and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint
                parts.append(checkpoint(self._chunk_loss, *args, use_reentrant=False))
            else:
                parts.append(self._chunk_loss(*args))
        return tuple(torch.cat(p) for p in zip(*parts))

    def _pass_loss(self, out, teacher, tgt, w, reach=None, streak=None):
        """One pass's rows (student outputs, teacher hidden states, next tokens; w: which rows are loss
        positions; reach: each row's loss weight, None = 1; streak: whether the earlier steps of each
        row's anchor all agreed with the base, None = no earlier step): (its loss, its stats, each row's
        acceptance chance, each row's agreement), or None when no row is a loss position. The loss is the
        weighted sum over the loss positions / their count; stats["in_a_row"]: the share of loss positions
        where this step and every earlier one of its anchor agree (what greedy drafting accepts)."""
        n = int(w.sum())
        if n == 0:
            return None
        kl, ce, agree, keep = self._loss_rows(out, teacher, tgt)
        wf = w.float() if reach is None else w.float() * reach
        loss = ((kl + self.cfg.ce_weight * ce) * wf).sum() / n
        run = agree if streak is None else agree & streak
        return loss, {"kl": float((kl.detach() * w).sum()) / n, "agree": int((agree & w).sum()) / n,
                      "in_a_row": int((run & w).sum()) / n,
                      "agree_all": float(agree.float().mean()), "n": n, "n_all": int(w.numel()),
                      "weight": float(wf.sum()) / n}, keep, run

    @staticmethod
    def _carried(reach, streak, sel, got):
        """(reach, streak) after a step whose rows are ``sel`` (an index into [B, T]): its rows' reach times
        their acceptance chance, and their streak with their own agreement; 0 / False elsewhere."""
        kept, ran = torch.zeros_like(reach), torch.zeros_like(streak)
        kept[sel], ran[sel] = reach[sel] * got[2], got[3]
        return kept, ran

    def _step_weight(self, s: int) -> float:
        """Draft step s's weight in the total: chain_weight^s, or (acceptance) 1, its rows carrying their own."""
        return 1.0 if self.cfg.step_weights == "acceptance" else self.cfg.chain_weight ** s

    def _inputs(self, h):
        """(the base's hidden states h, the first pass's h_{p-1} per position) from the trunk's rows."""
        h_in = self.head0.fuse(h)
        h = h[..., :self.base.hp.n_embd]
        return h, torch.cat([torch.zeros_like(h_in[:, :1]), h_in[:, :-1]], dim=1)

    def __call__(self, x, valid, lmask, h, all_rows: bool = False):
        """Loss (mean over the loss positions ``lmask``, weighted over draft steps) and per-step
        stats (one per draft step; with several heads one per head): kl, agree (top-1 agreement
        over ``lmask``: the positions drafts are made at), agree_all (over every ``valid``
        position; with all_rows=True, else = agree), n."""
        B, T = x.shape
        cfg = self.cfg
        cos, sin = self.cos[:T], self.sin[:T]
        tgt = torch.full_like(x, -1)
        tgt[:, :-1] = torch.where(valid[:, 1:], x[:, 1:], -1)
        pos = torch.arange(T, device=x.device)
        if self.parallel:
            return self._parallel(x, valid, lmask, h, tgt, all_rows)
        with self.autocast():
            emb = self.base.tok_embd[x]
            h, h_prev = self._inputs(h)
            history, total, wsum, stats = [], 0.0, 0.0, []
            n_pass = len(self.heads) if self.heads else cfg.chain
            reach = torch.ones_like(x, dtype=torch.float32)   # step s at p: the drafts of steps < s accepted
            streak = torch.ones_like(x, dtype=torch.bool)      # ... and all agreed with the base
            for s in range(n_pass):
                if self.heads:
                    # head s over its own teacher-forced entries (x_p, g_{s-1}(p-1))
                    out, _ = self.heads[s](emb, h_prev, cos, sin)
                else:
                    out, kv = self.head(emb, h_prev, cos, sin, history=history or None)
                    history.append(kv)
                ok = pos[None, :] >= s
                rows = (valid if all_rows else lmask) & ok
                acc_w = reach[rows] if cfg.step_weights == "acceptance" else None
                got = self._pass_loss(out[rows], h[rows], tgt[rows], lmask[rows], acc_w, streak[rows])
                if got is None:
                    break
                ws = self._step_weight(s)
                total, wsum = total + ws * got[0], wsum + ws * got[1]["weight"]
                stats.append(got[1])
                # step s+1 at p continues the draft step s made at p - 1
                kept, ran = self._carried(reach, streak, rows, got)
                reach = torch.cat([torch.zeros_like(kept[:, :1]), kept[:, :-1]], dim=1)
                streak = torch.cat([torch.zeros_like(ran[:, :1]), ran[:, :-1]], dim=1)
                h_prev = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
        return total / wsum, stats


    def _parallel(self, x, valid, lmask, h, tgt, all_rows):
        """A parallel head: one pass per position p; entry i of the pass at p learns the base's
        distribution at p + i (the token x_{p+1+i}), loss weight chain_weight^i; stats per entry."""
        B, T = x.shape
        cfg = self.cfg
        K = self.parallel
        with self.autocast():
            emb = self.base.tok_embd[x]
            h, h_prev = self._inputs(h)
            outs = self.head.parallel_forward(emb, h_prev, self.cos[:T + K - 1], self.sin[:T + K - 1])
            total, wsum, stats = 0.0, 0.0, []
            reach = torch.ones_like(x, dtype=torch.float32)   # entry i of the pass at p: entries < i accepted
            streak = torch.ones_like(x, dtype=torch.bool)      # ... and all agreed with the base
            for i, out in enumerate(outs):
                # the pass at p reaches p + i: that position must exist (its h is the teacher)
                ahead = torch.zeros_like(valid)
                ahead[:, :T - i] = valid[:, i:]
                rows = (valid if all_rows else lmask) & ahead
                b, p = rows.nonzero(as_tuple=True)
                acc_w = reach[b, p] if cfg.step_weights == "acceptance" else None
                got = self._pass_loss(out[b, p], h[b, p + i], tgt[b, p + i], lmask[rows], acc_w, streak[b, p])
                if got is None:
                    break
                ws = self._step_weight(i)
                total, wsum = total + ws * got[0], wsum + ws * got[1]["weight"]
                stats.append(got[1])
                reach, streak = self._carried(reach, streak, (b, p), got)
        return total / wsum, stats


# --------------------------------------------------------------------------- training

def _batches(indices: np.ndarray, batch: int, rng: np.random.Generator):
    while True:
        perm = rng.permutation(indices)
        for i in range(0, len(perm) - batch + 1 if len(perm) >= batch else 1, batch):
            yield perm[i:i + batch]


def evaluate(dist: Distiller, hid: Hiddens, idx: np.ndarray, batch: int) -> dict:
    """Validation: per draft step, KL and top-1 agreement over the positions drafts are made at
    (agree), and agreement over every position (agree_all: includes the prompt's)."""
    dist.head.eval()
    acc = None
    with torch.no_grad():
        for i in range(0, len(idx), batch):
            x, valid, lmask, h = hid.batch(idx[i:i + batch])
            _, stats = dist(x, valid, lmask, h, all_rows=True)
            if acc is None:
                acc = [{"kl": 0.0, "agree": 0.0, "in_a_row": 0.0, "agree_all": 0.0, "n": 0, "n_all": 0}
                       for _ in stats]
            for a, st in zip(acc, stats):
                a["kl"] += st["kl"] * st["n"]
                a["agree"] += st["agree"] * st["n"]
                a["in_a_row"] += st["in_a_row"] * st["n"]
                a["agree_all"] += st["agree_all"] * st["n_all"]
                a["n"] += st["n"]
                a["n_all"] += st["n_all"]
    dist.head.train()
    per_step = [{"kl": a["kl"] / max(a["n"], 1), "agree": a["agree"] / max(a["n"], 1),
                 "in_a_row": a["in_a_row"] / max(a["n"], 1),
                 "agree_all": a["agree_all"] / max(a["n_all"], 1), "n": a["n"]} for a in (acc or [])]
    # expected accepted drafts per step for greedy drafting of len(per_step) tokens (teacher-forced: the
    # share of positions where the first s steps all agree with the base, summed over s)
    est = sum(st["in_a_row"] for st in per_step)
    first = per_step[0] if per_step else {"agree": 0.0, "kl": 0.0, "agree_all": 0.0}
    return {"per_step": per_step, "agree": first["agree"], "kl": first["kl"],
            "agree_all": first["agree_all"], "est_accepted_per_step": est}


def _val_subset(data: Dataset, hid: Hiddens, cap: int, seed: int) -> np.ndarray:
    idx = hid.has_loss(data.indices(True))
    rng = np.random.default_rng(seed + 1)
    idx = rng.permutation(idx)
    out, n = [], 0
    for i in idx:
        if n >= cap:
            break
        out.append(i)
        n += int(hid.lens[i])
    return np.array(sorted(out, key=lambda i: -hid.lens[i]), dtype=np.int64)


def _term_as_interrupt():
    """SIGTERM (a scheduler or `timeout` stopping the run) saves a checkpoint like Ctrl-C does."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _restore_term(old) -> None:
    import signal

    if old is not None:
        signal.signal(signal.SIGTERM, old)


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def graft(job: GraftJob, log=None) -> dict:
    """Generate data, train the head, write the head GGUF; returns the report dict.

    The steps, in order: set up torch, load the base and make the initial head(s), prepare the
    data set and the trunk's hidden states, train (from a checkpoint with job.resume), write the
    head GGUF, write the report."""
    log = log or (lambda msg: print(f"pymtp graft: {msg}", file=sys.stderr, flush=True))
    cfg = job.train
    t_start = time.time()
    job.out.parent.mkdir(parents=True, exist_ok=True)
    device = _setup_torch(cfg)
    base_g, base, head_inits = _build_models(job, device, log)
    n_heads = len(head_inits)
    data, summary, t_data, eog_ids = _prepare_data(job, base, base_g, device, log)

    t0 = time.time()
    taps = feature_layers(base.hp.n_layer) if cfg.features else ()
    hid = Hiddens(base, data, cfg.seq_len, cfg.cache_gb, device, job.progress, log, cfg.loss_positions, taps)
    t_hidden = time.time() - t0

    draft_ids = _draft_ids(job, data, base_g.hparams.n_vocab, eog_ids, log) if job.draft_vocab else None
    head, opt = _head_and_optimizer(head_inits, cfg, device)
    dist = Distiller(base, head, cfg, device, _autocast_for(device), vocab_ids=draft_ids)
    ckpt = _Checkpoint(job.ckpt_path, _settings_key(job, base_g, n_heads), head, opt, cfg)
    state = _TrainState()
    if job.resume:
        ckpt.resume(state, device, log)
    val_idx = _val_subset(data, hid, cfg.val_tokens, cfg.seed)
    t_train = _train(job, dist, hid, data, opt, ckpt, state, val_idx, n_heads, log)

    final_val = state.history["val"][-1] if state.history["val"] else None
    final_loss = (state.ema_loss if state.ema_loss is not None else
                  (state.history["train"][-1]["loss"] if state.history["train"] else None))
    per_head = _write_head(job, base_g, head, n_heads, state.step, final_val, final_loss, summary)
    log(f"wrote {job.out}")
    draft_vocab = _trim(job, data, draft_ids, base_g.hparams.n_vocab, log) if job.draft_vocab else None
    acceptance = _check_acceptance(job, base_g, head, n_heads, state.step, final_val, final_loss, summary,
                                   draft_ids, log)
    report = {
        "base": {"path": str(job.base), "sha256": base_g.sha256, "hparams": base_g.hparams.to_dict()},
        "head": {"path": str(job.out), "type": job.head_type, "n_heads": n_heads,
                 "n_params": int(sum(p.numel() for p in head.parameters()))},
        "settings": {"train": asdict(cfg), "gen": asdict(job.gen), "corpus": [str(c) for c in job.corpus],
                     "device": str(device), "torch": torch.__version__},
        "data": summary,
        "final": {"step": state.step, "train_loss_ema": final_loss, "val": final_val},
        # validation top-1 agreement with the trunk of each head (heads > 1; = per_step[j]["agree"])
        "val_top1_per_head": per_head if n_heads > 1 else None,
        # the written head through the native engine on held-out prompts (None: --check-prompts 0)
        "acceptance": acceptance,
        "draft_vocab": draft_vocab,
        "history": state.history,
        "wall_s": {"data": t_data, "hidden_cache": t_hidden, "train": t_train, "total": time.time() - t_start},
        "train_tokens_per_s": (state.n_tok_run / max(time.time() - state.t_run0, 1e-9)) if state.n_tok_run else None,
    }
    if job.report:
        Path(job.report).write_text(json.dumps(report, indent=2))
        log(f"report: {job.report}")
    return report


# --------------------------------------------------------------------------- graft's steps

def _setup_torch(cfg: TrainConfig) -> torch.device:
    """The device, TF32 on CUDA, torch's threads and the seeds of torch and random."""
    device = pick_device(cfg.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    return device


def _autocast_for(device: torch.device):
    """The head's autocast context: bf16 on CUDA, none on the CPU."""
    def autocast():
        if device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    return autocast


def head_from_file(path: Path, base_g, cfg: TrainConfig, log=lambda msg: None) -> MTPHead:
    """The head a warm-started run trains on from (--init-head): head 0 of a head GGUF that pymtp graft
    wrote for this very base (q8_0 matrices dequantized). Its mask rows and feature matrix are kept; a
    sequential head becomes a parallel one (new mask rows) or a feature head (feat = [I | noise], so it
    starts drafting as it did); a draft vocabulary (pymtp trim) is not carried over: the run trains on
    --draft-vocab's, the whole vocabulary by default. What cannot be continued is refused: another base,
    another K, dropping its features."""
    from pymtp.gguf_meta import read_info

    if cfg.heads > 1:
        raise PymtpError("--init-head continues one head: it takes no --heads N")
    prov = read_info(path).graft_provenance
    sha = prov.get("base_sha256")
    if sha != base_g.sha256:
        raise PymtpError(f"--init-head {path}: " + ("not a head pymtp graft wrote" if sha is None else
                         f"trained for another base (sha256 {sha[:12]}..., this base {base_g.sha256[:12]}...)"))
    if "draft_vocab" in prov:
        log(f"--init-head: {path.name}'s draft vocabulary ({prov['draft_vocab']} tokens) is not carried over: "
            "the run trains on --draft-vocab's (the whole vocabulary without it)")
    try:
        head = MTPHead.from_gguf(base_g.hparams, path)
    except ValueError as e:
        raise PymtpError(f"--init-head {path}: {e}") from e
    if head.parallel and head.parallel != cfg.parallel:
        raise PymtpError(f"--init-head {path}: a parallel head of K = {head.parallel}: pass --parallel "
                         f"{head.parallel}" + (f" (got {cfg.parallel})" if cfg.parallel else ""))
    if head.features and not cfg.features:
        raise PymtpError(f"--init-head {path}: the head is fed trunk features: drop --no-features")
    return head


def _build_models(job: GraftJob, device: torch.device, log):
    """(base GGUF weights, the frozen torch trunk, one initial MTPHead per head to train)."""
    cfg = job.train
    log(f"reading {job.base}")
    base_g = load_base(job.base)
    hp = base_g.hparams
    log(f"{hp.arch}: {hp.n_layer} layers, n_embd {hp.n_embd}, {hp.n_head}/{hp.n_head_kv} heads, "
        f"vocab {hp.n_vocab}; device {device}")
    n_params = sum(t.numel() for t in base_g.tensors.values())
    trunk_dtype = torch.bfloat16 if device.type == "cuda" and n_params > BF16_TRUNK_PARAMS else torch.float32
    base = BaseModel(base_g, dtype=trunk_dtype, device=device)
    n_heads = int(cfg.heads)
    if n_heads < 1:
        raise PymtpError(f"heads must be >= 1 (got {n_heads})")
    if cfg.parallel and (n_heads > 1 or cfg.chain > 1):
        raise PymtpError("a parallel head (--parallel K) is one head trained teacher-forced: "
                         "it takes neither --heads N nor --chain")
    if cfg.init_head:
        head_inits = [head_from_file(Path(cfg.init_head), base_g, cfg, log)]
        log(f"starting from {cfg.init_head}")
    else:
        # head 0 exactly as a single-head run; head j >= 1: the same recipe, noise seeded seed + j
        head_inits = [MTPHead.from_base(base_g, init=cfg.init, seed=cfg.seed + j, index=j) for j in range(n_heads)]
    if cfg.parallel and not head_inits[0].parallel:
        head_inits[0].make_parallel(cfg.parallel, seed=cfg.seed)
    if cfg.features and not head_inits[0].features:
        # the first head is fed the trunk's rows; chained heads j >= 1 take head j-1's output as before
        head_inits[0].make_features(seed=cfg.seed)
    base_g.tensors = {}  # the BaseModel and the head hold what is needed
    return base_g, base, head_inits


def _prepare_data(job: GraftJob, base: BaseModel, base_g, device: torch.device, log):
    """The training data (text the base writes itself and/or corpus files): (data set, its
    summary, seconds taken, the base's end-of-generation token ids). Raises PymtpError when
    nothing is left to train on."""
    from .tokenizer import Tokenizer

    cfg, gcfg = job.train, job.gen
    cache_dir = Path(job.data_cache) if job.data_cache else default_cache_dir()
    t0 = time.time()
    with (job.tokenizer or Tokenizer(job.base)) as tok:
        eog_ids = list(tok.eog_ids)
        parts = []
        if gcfg.samples > 0:
            gen_batch = job.gen_batch or auto_gen_batch(base, gcfg, device)
            parts.append(generate_dataset(base, tok, gcfg, cache_dir, base_g.sha256, gen_batch=gen_batch,
                                          progress=job.progress, log=log))
        if job.corpus:
            parts.append(corpus_dataset(job.corpus, tok, cfg.seq_len))
    data = Dataset.concat(parts)
    t_data = time.time() - t0
    summary = data.summary()
    log(f"data: {summary['train_sequences']} train / {summary['val_sequences']} val sequences, "
        f"{summary['tokens']} tokens ({t_data:.0f} s)")
    if summary["train_sequences"] == 0:
        raise PymtpError("no training sequences (all data is held out): use more --samples")
    return data, summary, t_data, eog_ids


def _head_and_optimizer(head_inits: list, cfg: TrainConfig, device: torch.device):
    """The module trained (one MTPHead, or a ModuleList of chained heads) on the device, and its
    AdamW (weight decay on matrices only)."""
    head = head_inits[0].to(device) if len(head_inits) == 1 else torch.nn.ModuleList(head_inits).to(device)
    decay = [p for p in head.parameters() if p.dim() >= 2]
    no_decay = [p for p in head.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.type == "cuda")
    return head, opt


def _settings_key(job: GraftJob, base_g, n_heads: int) -> dict:
    """What a checkpoint must have been written for to be resumed: base, data and settings."""
    cfg = job.train
    key = {"base_sha256": base_g.sha256, "data": job.gen.key(base_g.sha256),
           "corpus": sorted(str(c) for c in job.corpus), "seq_len": cfg.seq_len, "chain": cfg.chain,
           "loss_positions": cfg.loss_positions}
    if n_heads > 1:
        key["heads"] = n_heads
    if cfg.parallel:
        key["parallel"] = cfg.parallel
    if cfg.step_weights != "geometric":
        key["step_weights"] = cfg.step_weights
    if cfg.chain_weight != TrainConfig.chain_weight:
        key["step_decay"] = cfg.chain_weight
    if cfg.init_head:
        key["init_head"] = str(Path(cfg.init_head).resolve())
    if cfg.features:
        key["features"] = True
    if job.draft_vocab:
        key["draft_vocab"] = job.draft_vocab   # the head trains on its draft vocabulary
    return key


@dataclass
class _TrainState:
    """Where training stands: what a checkpoint keeps (step, history) and the running stats."""

    step: int = 0
    history: dict = field(default_factory=lambda: {"train": [], "val": []})
    ema_loss: float | None = None
    ema_agree: float | None = None
    n_tok_run: int = 0               # loss tokens trained on in this run (train_tokens_per_s)
    t_run0: float = 0.0


class _Checkpoint:
    """The checkpoint next to the output (<out>.ckpt.pt): head, optimizer, step and history,
    valid only for the settings ``key`` it was written with."""

    def __init__(self, path: Path, key: dict, head, opt, cfg: TrainConfig):
        self.path, self.key, self.head, self.opt, self.cfg = path, key, head, opt, cfg

    def save(self, state: _TrainState) -> None:
        _atomic_save({"version": CKPT_VERSION, "key": self.key, "head": self.head.state_dict(),
                      "opt": self.opt.state_dict(), "step": state.step, "history": state.history,
                      "train_config": asdict(self.cfg)}, self.path)

    def resume(self, state: _TrainState, device: torch.device, log) -> None:
        """Load the checkpoint into the head, the optimizer and ``state`` (none there: say so)."""
        if not self.path.is_file():
            log(f"--resume: no checkpoint at {self.path}, starting from scratch")
            return
        saved = torch.load(self.path, map_location=device, weights_only=False)
        if saved.get("version") != CKPT_VERSION or saved.get("key") != self.key:
            raise PymtpError(f"{self.path} was written for another base/data/settings; delete it or drop --resume")
        self.head.load_state_dict(saved["head"])
        self.opt.load_state_dict(saved["opt"])
        state.step, state.history = saved["step"], saved["history"]
        log(f"resumed from {self.path} at step {state.step}")


def _validate(dist: Distiller, hid: Hiddens, val_idx: np.ndarray, batch: int, state: _TrainState) -> dict:
    """Evaluate on the validation subset now and record it in the history."""
    v = evaluate(dist, hid, val_idx, batch)
    state.history["val"].append({"step": state.step, **v})
    return v


def _train(job: GraftJob, dist: Distiller, hid: Hiddens, data: Dataset, opt, ckpt: _Checkpoint,
           state: _TrainState, val_idx: np.ndarray, n_heads: int, log) -> float:
    """The training loop from state.step to cfg.steps: validation every eval_every steps, a
    checkpoint every save_every steps (and at least every 10 minutes), at the end and on
    Ctrl-C / SIGTERM (then re-raised as KeyboardInterrupt). Returns its wall time in seconds."""
    cfg = job.train
    head = dist.head
    eval_every = cfg.eval_every if cfg.eval_every > 0 else max(1, cfg.steps // 10)
    save_every = cfg.save_every if cfg.save_every > 0 else max(1, cfg.steps // 20)
    eval_batch = max(cfg.batch, 1)

    if state.step == 0 and len(val_idx):
        v = _validate(dist, hid, val_idx, eval_batch, state)
        log(f"val at init: top-1 agreement {v['agree']:.3f} (all positions {v['agree_all']:.3f}), "
            f"KL {v['kl']:.3f}" + _heads_note(v, n_heads))

    rng = np.random.default_rng(cfg.seed + 1000 * state.step)
    train_idx = hid.has_loss(data.indices(False))
    if len(train_idx) == 0:
        raise PymtpError("no training positions: every training sequence is all prompt (raise --seq-len)")
    batches = _batches(train_idx, min(cfg.batch, len(train_idx)), rng)
    bar = None
    if job.progress:
        from tqdm import tqdm
        bar = tqdm(total=cfg.steps, initial=state.step, desc="training", unit="step", dynamic_ncols=True)
    t_train0 = time.time()
    last_save = time.time()
    state.n_tok_run, state.t_run0 = 0, time.time()
    old_term = _term_as_interrupt()
    try:
        while state.step < cfg.steps:
            for g in opt.param_groups:
                g["lr"] = lr_at(state.step, cfg)
            x, valid, lmask, h = hid.batch(next(batches))
            loss, stats = dist(x, valid, lmask, h)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip)
            opt.step()
            state.step += 1
            step = state.step
            lv, ag = float(loss.detach()), stats[0]["agree"]
            state.ema_loss = lv if state.ema_loss is None else 0.95 * state.ema_loss + 0.05 * lv
            state.ema_agree = ag if state.ema_agree is None else 0.95 * state.ema_agree + 0.05 * ag
            state.n_tok_run += stats[0]["n"]
            if step % 10 == 0 or step == cfg.steps or step <= 5:
                rec = {"step": step, "loss": lv, "agree": ag, "lr": lr_at(step - 1, cfg), "grad_norm": float(gnorm)}
                if n_heads > 1:
                    rec["kl_per_head"] = [st["kl"] for st in stats]
                    rec["agree_per_head"] = [st["agree"] for st in stats]
                state.history["train"].append(rec)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"loss {state.ema_loss:.3f} top1 {state.ema_agree:.3f} "
                                    f"{state.n_tok_run / max(time.time() - state.t_run0, 1e-9):.0f} tok/s")
            if (step % eval_every == 0 or step == cfg.steps) and len(val_idx):
                v = _validate(dist, hid, val_idx, eval_batch, state)
                (bar.write if bar is not None else log)(_val_message(v, step, n_heads))
            if step % save_every == 0 or time.time() - last_save > 600:
                ckpt.save(state)
                last_save = time.time()
    except KeyboardInterrupt:
        ckpt.save(state)
        if bar is not None:
            bar.close()
        log(f"interrupted at step {state.step}; checkpoint saved to {ckpt.path} (continue with --resume)")
        raise
    finally:
        _restore_term(old_term)
    if bar is not None:
        bar.close()
    ckpt.save(state)
    return time.time() - t_train0


def _val_message(v: dict, step: int, n_heads: int) -> str:
    msg = (f"step {step}: val top-1 agreement {v['agree']:.3f} (all positions "
           f"{v['agree_all']:.3f}), KL {v['kl']:.3f}")
    if n_heads > 1:
        msg += _heads_note(v, n_heads)
    elif len(v["per_step"]) > 1:
        msg += (" (draft positions 2..: " + ", ".join(f"{s['agree']:.3f}" for s in v["per_step"][1:])
                + "; all agreeing up to them: " + ", ".join(f"{s['in_a_row']:.3f}" for s in v["per_step"][1:])
                + ")")
    return msg


def _write_head(job: GraftJob, base_g, head, n_heads: int, step: int, final_val: dict | None,
                final_loss: float | None, summary: dict, out: Path | None = None,
                head_type: str | None = None) -> list[float]:
    """Write the trained head(s) as a head-only GGUF with the run's provenance (to ``out``,
    default job.out, as ``head_type``, default job.head_type); returns each head's final
    validation top-1 agreement."""
    cfg, hp = job.train, base_g.hparams
    provenance = {
        "version": 1,
        "base_file": job.base.name,
        "base_sha256": base_g.sha256,
        "steps": int(step),
        "final_loss": None if final_loss is None else float(final_loss),
        "val_top1_agreement": None if final_val is None else float(final_val["agree"]),
        "init": cfg.init,
        "chain": int(cfg.chain),
        "train_tokens": int(summary["train_tokens"]),
    }
    heads = [head] if n_heads == 1 else list(head)
    per_head = [float(st["agree"]) for st in final_val["per_step"]] if final_val else []
    if cfg.parallel:
        provenance["parallel"] = int(cfg.parallel)
    if cfg.step_weights != "geometric":
        provenance["step_weights"] = cfg.step_weights
    if cfg.chain_weight != TrainConfig.chain_weight:
        provenance["step_decay"] = float(cfg.chain_weight)
    if cfg.init_head:
        provenance["init_head"] = Path(cfg.init_head).name
    if cfg.features:
        provenance["feature_layers"] = ",".join(str(il) for il in feature_layers(hp.n_layer))
    if n_heads > 1:
        provenance["heads"] = n_heads
        if per_head:
            provenance["val_top1_agreement_per_head"] = ",".join(f"{a:.4f}" for a in per_head)
    head_type = head_type or job.head_type
    if head_type != "f16":
        provenance["matrix_type"] = head_type
    tensors = {}
    for hd in heads:
        tensors.update(hd.gguf_tensors())
    name = f"{hp.name or job.base.stem} MTP head (pymtp graft)"
    if n_heads > 1:
        name = f"{hp.name or job.base.stem} MTP heads x{n_heads} (pymtp graft)"
    write_head_gguf(out or job.out, hp.arch, hp.n_layer, hp.n_embd, tensors, name=name,
                    head_type=head_type, provenance=provenance, n_heads=n_heads)
    return per_head


def _draft_ids(job: GraftJob, data: Dataset, n_vocab: int, eog_ids: list, log) -> np.ndarray:
    """The head's draft vocabulary: the job.draft_vocab tokens the base emits most in the training
    data (generated parts), end-of-generation tokens first. The head trains on them and is trimmed
    to them when written."""
    from . import trim

    ids = trim.choose(trim.generated_counts(data, n_vocab), job.draft_vocab, always=eog_ids)
    log(f"draft vocabulary: {len(ids)} of {n_vocab} tokens (the head trains and drafts on these)")
    return ids


def _trim(job: GraftJob, data: Dataset, ids: np.ndarray, n_vocab: int, log) -> dict:
    """Give the written head its draft vocabulary ``ids``; returns its size and held-out coverage."""
    from . import trim

    cov = trim.coverage(trim.generated_counts(data, n_vocab, val=True), ids)
    trim.trim_head(job.out, job.base, ids, job.out, extra_provenance={"draft_vocab_coverage": cov})
    log(f"draft vocabulary: {len(ids)} of {n_vocab} tokens, {cov:.1%} of the held-out generated tokens")
    return {"n": int(len(ids)), "held_out_coverage": cov, "trained_on": True}


def _check_acceptance(job: GraftJob, base_g, head, n_heads: int, step: int, final_val, final_loss,
                      summary: dict, draft_ids, log) -> dict | None:
    """Measure the written head through the native engine (greedy, draft length max(3, heads))
    on held-out prompts, record the result in the head (pymtp.graft.acceptance) and return it
    for the report. A quantized head is compared with its f16 original (with the same draft
    vocabulary ``draft_ids``, if any) on the same prompts, and a loss of acceptance is reported
    (quantized heads can silently stop accepting)."""
    from . import acceptance as acc_mod
    from .trim import trim_head

    prompts = held_out_prompts(job.gen, job.check_prompts) if job.check_prompts > 0 and job.gen.samples else []
    if not prompts:
        return None
    k = max(3, n_heads, job.train.parallel)
    t0 = time.time()

    def measure(path):
        return acc_mod.measure(job.base, path, prompts, k=k, max_tokens=job.check_tokens)

    try:
        a = measure(job.out)
        result = {"k": k, "max_tokens": job.check_tokens, **a.to_dict()}
        if job.head_type != "f16":
            f16 = job.out.with_name(job.out.name + ".f16-check.gguf")
            try:
                _write_head(job, base_g, head, n_heads, step, final_val, final_loss, summary, out=f16, head_type="f16")
                if draft_ids is not None:
                    trim_head(f16, job.base, draft_ids, f16)
                ref = measure(f16)
            finally:
                f16.unlink(missing_ok=True)
            result["f16"] = ref.to_dict()
            loss = ref.per_position[0] - a.per_position[0]
            result["quantization_loss"] = loss
            if loss > acc_mod.QUANT_LOSS_WARN:
                log(f"warning: the {job.head_type} head accepts {loss:.3f} less at draft position 1 than its "
                    f"f16 original ({a.per_position[0]:.3f} vs {ref.per_position[0]:.3f}): write it with --type f16")
    except PymtpError as e:
        log(f"acceptance check skipped: {e}")
        return None
    copy_gguf(job.out, job.out, provenance=acc_mod.provenance(a))
    log(f"held-out acceptance (native engine, greedy, k={k}): {a.line()} [{time.time() - t0:.0f} s]")
    return result


def _heads_note(v: dict, n_heads: int) -> str:
    if n_heads <= 1 or not v.get("per_step"):
        return ""
    return " (per head: " + ", ".join(f"{s['agree']:.3f}" for s in v["per_step"]) + ")"


def auto_gen_batch(base: BaseModel, gcfg: GenConfig, device) -> int:
    """Sequences generated at once: 32 on CPU; on CUDA as many as ~30% of the free memory holds
    (KV cache + logits and sampling buffers), between 8 and 1024."""
    if device.type != "cuda":
        return 32
    hp = base.hp
    free, _ = torch.cuda.mem_get_info(device)
    elem = torch.finfo(base.dtype).bits // 8
    t_max = (128 if not gcfg.self_prompts else 192) + gcfg.gen_tokens   # built-in prompts are short
    per_seq = 2 * hp.n_layer * hp.n_head_kv * hp.head_dim * t_max * elem + 8 * hp.n_vocab * 4
    return int(max(8, min(1024, 0.3 * free // per_seq)))
