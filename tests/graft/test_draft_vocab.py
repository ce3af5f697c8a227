"""Draft vocabularies for models with their own MTP layers (pymtp trim MODEL): a draft-vocabulary file
loads like a head file, the model's MTP blocks score only its tokens (-inf elsewhere), and nothing the
user sees changes. (Trimmed grafted heads of dense models: tests/graft/test_graft.py.)"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import pymtp
from pymtp.cli.main import main
from pymtp.errors import ModelLoadError
from pymtp.graft import trim

PROMPT = "The quick brown fox jumps over the"


def _keep(model_path, n: int) -> np.ndarray:
    """n token ids: the ones plain greedy decoding of PROMPT emits (so drafts are accepted), the
    end-of-generation tokens, then the lowest ids."""
    with pymtp.Model(model_path, mtp="off", n_ctx=256, n_threads=1) as m:
        toks = m.generate(PROMPT, max_tokens=24).tokens
        n_vocab = m.rt.n_vocab
    counts = np.zeros(n_vocab, np.int64)
    counts[np.asarray(toks)] += 100
    counts[:n] += 1
    return trim.choose(counts, n, always=[2]), n_vocab


def _peek(model_path, head, k=3):
    with pymtp.Model(model_path, mtp="on", mtp_head=head, n_draft=k, n_ctx=256, n_threads=1) as m:
        m.generate(PROMPT, max_tokens=1)
        toks, logits = m.rt.peek_draft(k)
    return toks, np.asarray(logits)


# step35's tiny model has 3 MTP blocks, the others 1 by default
@pytest.mark.parametrize("arch,n_nextn", [("glm4moe", None), ("qwen35", None), ("step35", None), ("glm4moe", 2)])
def test_draft_vocabulary_file_scores_only_its_tokens_and_is_lossless(tiny_model_path, tmp_path, arch, n_nextn):
    model = tiny_model_path(arch, n_nextn=n_nextn)
    keep, n_vocab = _keep(model, 64)
    out = trim.draft_vocab_file(model, keep, tmp_path / "dv.gguf")

    r = gguf.GGUFReader(str(out))
    n_all = r.get_field(f"{arch}.block_count").contents()
    n_mtp = r.get_field(f"{arch}.nextn_predict_layers").contents()
    assert n_mtp == gguf.GGUFReader(str(model)).get_field(f"{arch}.nextn_predict_layers").contents()
    by_name = {t.name: t for t in r.tensors}
    assert len(by_name) == 2 * n_mtp
    for L in range(n_all - n_mtp, n_all):
        assert by_name[f"blk.{L}.nextn.embed_tokens.d2t"].data.tolist() == keep.tolist()
        assert int(by_name[f"blk.{L}.nextn.shared_head_head.draft"].shape[1]) == len(keep)

    full_toks, full = _peek(model, "")            # the model's own MTP layers, untrimmed
    toks, cut = _peek(model, out)
    outside = np.setdiff1d(np.arange(n_vocab), keep)
    assert np.all(np.isneginf(cut[:, outside]))
    assert np.all(np.isfinite(cut[:, keep]))
    assert np.all(np.isin(toks, keep))
    # draft step 1 has the same input either way: the kept tokens score exactly as before
    np.testing.assert_allclose(cut[0, keep], full[0, keep], rtol=0, atol=1e-5)

    # lossless, with drafts accepted, every block drafting
    with pymtp.Model(model, mtp="on", mtp_head=out, n_draft=3, n_ctx=256, n_threads=1) as m:
        assert m.mtp_head == out
        on = m.generate(PROMPT, max_tokens=24)
        assert on.stats.n_accepted > 0
    with pymtp.Model(model, mtp="off", n_ctx=256, n_threads=1) as m:
        assert m.generate(PROMPT, max_tokens=24).tokens == on.tokens


def test_pymtp_trim_writes_a_draft_vocabulary_file_found_next_to_the_model(tiny_model_path, tmp_path, capsys):
    import shutil

    model = tmp_path / "m.gguf"
    shutil.copy(tiny_model_path("qwen35"), model)
    keep, n_vocab = _keep(model, 48)
    counts = tmp_path / "counts.npz"
    c = np.zeros(n_vocab, np.int64)
    c[keep] = 5
    np.savez(counts, train=c, val=c)
    side = tmp_path / "m.mtp.gguf"
    assert main(["trim", str(model), "-n", "48", "-o", str(side), "--counts", str(counts)]) == 0
    text = capsys.readouterr().out
    assert "draft vocabulary of 48 of" in text and "held-out coverage 0.9" in text
    assert "next to the model: used automatically" in text

    assert main(["info", str(model)]) == 0
    info = capsys.readouterr().out
    assert "draft vocabulary from m.mtp.gguf (found next to the model)" in info
    assert "draft vocab     48 tokens (pymtp trim)" in info
    with pymtp.Model(model, mtp="on", n_ctx=256, n_threads=1) as m:    # picked up without being named
        assert m.mtp_head == side
        assert "found next to the model" in m.mtp_reason
    with pymtp.Model(model, mtp="on", mtp_head="", n_ctx=256, n_threads=1) as m:   # "": no file at all
        assert m.mtp_head is None and m.mtp_enabled

    # bad input: a clear error, nothing written
    for argv, message in (
            (["--mtp-head", str(side)], "has MTP layers of its own"),
            (["--type", "q8_0"], "writes only their draft vocabulary"),
            (["-n", str(n_vocab)], "smaller than the vocabulary")):
        bad = tmp_path / "bad.gguf"
        assert main(["trim", str(model), "-n", "16", "--counts", str(counts), "-o", str(bad), *argv]) != 0
        assert message in capsys.readouterr().err
        assert not bad.exists()


def test_a_draft_vocabulary_file_for_another_model_is_refused(tiny_model_path, tmp_path):
    """The loader checks the file against the model: a clear error naming the problem."""
    one, two = tiny_model_path("glm4moe"), tiny_model_path("glm4moe", n_nextn=2)
    keep, _ = _keep(one, 32)
    for_two = trim.draft_vocab_file(two, keep, tmp_path / "two.gguf")
    with pytest.raises(ModelLoadError, match="MTP draft vocabulary .*block_count must be the model's"):
        pymtp.Model(one, mtp="on", mtp_head=for_two, n_ctx=128, n_threads=1)
    for_qwen = trim.draft_vocab_file(tiny_model_path("qwen35"), keep, tmp_path / "q.gguf")
    with pytest.raises(ModelLoadError, match="architecture 'qwen35' does not match"):
        pymtp.Model(one, mtp="on", mtp_head=for_qwen, n_ctx=128, n_threads=1)

    # a map with a token id the model does not have
    from pymtp.graft.writer import copy_gguf

    r = gguf.GGUFReader(str(trim.draft_vocab_file(one, keep, tmp_path / "ok.gguf")))
    d2t = next(t for t in r.tensors if t.name.endswith(".d2t"))
    bad_ids = np.asarray(d2t.data, np.int32).copy()
    bad_ids[-1] = 10**7
    bad = copy_gguf(tmp_path / "ok.gguf", tmp_path / "bad.gguf", tensors={d2t.name: (bad_ids, None)})
    with pytest.raises(ModelLoadError, match="ascending tokens of the model"):
        pymtp.Model(one, mtp="on", mtp_head=bad, n_ctx=128, n_threads=1)
