# Sort one decode's kernels (Nsight Compute CSV from bench/device/step_cost.py --ncu-phase N) into
# op families, layer kinds and, for quantized mat-vecs, the weight they read (issue 19's breakdown).
#
#     python3 bench/device/kernel_breakdown.py MODEL.gguf k1.csv k4.csv [--json out.json]
#
# Each CSV is one decode (n tokens). A mat-vec kernel is matched to weights by its quant type and
# grid (rows / rows per block); other kernels go to the layer kind of the mat-vec before them, except
# those whose name says their kind (flash attention and RoPE: attention; the delta-net recurrence
# and its conv: Gated DeltaNet). The attribution of small elementwise kernels is therefore approximate.
import argparse
import csv
import json
import re
import sys
from collections import defaultdict

GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
              12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}
FAMILIES = [  # (substring of the kernel name, family), first match wins
    ("mul_mat_vec_q", "mat-vec (quantized)"), ("mul_mat_vec", "mat-vec (float)"), ("mul_mat_q", "mat-mat (mmq)"),
    ("quantize", "quantize activations"), ("flash_attn", "attention (flash)"), ("soft_max", "softmax"),
    ("gated_delta", "delta-net recurrence"), ("delta_net", "delta-net recurrence"), ("ssm_conv", "conv1d (GDN)"),
    ("norm", "norm"), ("rope", "rope"), ("bin_bcast", "add/mul"),
    ("set_rows", "copy / KV write"), ("cpy", "copy / KV write"), ("copy", "copy / KV write"),
    ("get_rows", "get_rows"), ("argsort", "MoE routing"), ("topk", "MoE routing"), ("argmax", "argmax"),
    ("gemm", "cuBLAS gemm"), ("cutlass", "cuBLAS gemm"), ("concat", "concat"), ("scale", "scale"),
    ("unary", "elementwise"), ("silu", "elementwise"), ("sigmoid", "elementwise"), ("softplus", "elementwise"),
    ("glu", "elementwise"), ("exp", "elementwise"), ("sum", "reduce"),
]
ROLE_KIND = {  # GGUF tensor role -> layer kind
    "attn_q": "attention", "attn_k": "attention", "attn_v": "attention", "attn_output": "attention",
    "attn_qkv": "GDN", "attn_gate": "GDN", "ssm_alpha": "GDN", "ssm_beta": "GDN", "ssm_out": "GDN",
    "ssm_ba": "GDN", "ffn_gate": "FFN", "ffn_up": "FFN", "ffn_down": "FFN", "ffn_gate_inp": "FFN",
    "ffn_gate_exps": "FFN", "ffn_up_exps": "FFN", "ffn_down_exps": "FFN", "ffn_gate_shexp": "FFN",
    "ffn_up_shexp": "FFN", "ffn_down_shexp": "FFN", "ffn_gate_inp_shexp": "FFN", "output": "output layer",
}


def weights(model: str):
    """(qtype, rows) -> set of (role, kind) for the trunk's matrices."""
    import gguf

    r = gguf.GGUFReader(model)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    nl = int(r.fields[f"{arch}.block_count"].parts[-1][0])
    key = f"{arch}.nextn_predict_layers"
    nextn = int(r.fields[key].parts[-1][0]) if key in r.fields else 0
    n_trunk = nl - nextn
    out = defaultdict(set)
    for t in r.tensors:
        name = t.name
        if len(t.shape) < 2:
            continue
        m = re.match(r"blk\.(\d+)\.(.+)\.weight$", name)
        if m:
            if int(m.group(1)) >= n_trunk:
                continue  # the MTP block: not part of the target's decode
            role = m.group(2)
        elif name == "output.weight":
            role = "output"
        else:
            continue
        rows = int(t.shape[1])
        out[(t.tensor_type.name, rows)].add((role, ROLE_KIND.get(role, "other")))
    return out


def family(name: str) -> str:
    low = name.lower()
    for key, fam in FAMILIES:
        if key in low:
            return fam
    return "other: " + name.split("(")[0].replace("void ", "")[:40]


def read_csv(path: str):
    rows = [ln for ln in open(path, errors="replace") if ln.startswith('"')]
    rd = list(csv.reader(rows))
    head, data = rd[0], rd[1:]
    data = [r for r in data if r and r[0].isdigit()]    # drop the units row
    ix = {h: i for i, h in enumerate(head)}
    dur = ix.get("gpu__time_duration.sum")
    out = []
    for r in data:
        ns = float(r[dur].replace(",", ""))
        grid = tuple(int(x) for x in re.findall(r"\d+", r[ix["Grid Size"]]))
        out.append({"id": int(r[0]), "name": r[ix["Kernel Name"]], "us": ns / 1e3, "grid": grid})
    out.sort(key=lambda k: k["id"])
    return out


def classify(kernels, wmap):
    kind = "embedding"
    for k in kernels:
        fam = family(k["name"])
        k["family"], k["role"] = fam, ""
        m = re.search(r"mul_mat_vec_q(?:_moe)?<(?:\(ggml_type\))?(\d+), (\d+)", k["name"])
        if m:
            qt, ncols = GGML_TYPES.get(int(m.group(1)), m.group(1)), int(m.group(2))
            k["qtype"], k["ncols"] = qt, ncols
            gx = k["grid"][0] if k["grid"] else 0
            cands = set()
            for rpb in (1, 2, 4, 8):
                for rows in range(gx * rpb - rpb + 1, gx * rpb + 1):
                    cands |= wmap.get((qt, rows), set())
            if cands:
                roles = sorted({r for r, _ in cands})
                kinds = sorted({kd for _, kd in cands})
                k["role"] = "/".join(roles)
                kind = kinds[0] if len(kinds) == 1 else "/".join(kinds)
        if fam in ("attention (flash)", "rope", "softmax"):
            k["kind"] = "attention"
        elif fam in ("delta-net recurrence", "conv1d (GDN)"):
            k["kind"] = "GDN"
        else:
            k["kind"] = kind
    return kernels


def summarize(kernels):
    tot = sum(k["us"] for k in kernels)
    by = {key: defaultdict(float) for key in ("family", "kind", "role")}
    cnt = defaultdict(int)
    for k in kernels:
        by["family"][k["family"]] += k["us"]
        by["kind"][k["kind"]] += k["us"]
        if k["role"]:
            by["role"][f"{k['role']} {k.get('qtype', '')}"] += k["us"]
        cnt[k["family"]] += 1
    return {"total_us": tot, "n_kernels": len(kernels), "counts": dict(cnt),
            **{key: dict(v) for key, v in by.items()}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("csvs", nargs="+", help="one CSV per decode size, in order (e.g. k1.csv k4.csv)")
    ap.add_argument("--labels", default=None, help="column labels (default: the CSV names)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    wmap = weights(a.model)
    labels = a.labels.split(",") if a.labels else [c.rsplit("/", 1)[-1].removesuffix(".csv") for c in a.csvs]
    sums = [summarize(classify(read_csv(c), wmap)) for c in a.csvs]
    base = sums[0]["total_us"]
    print("device time per decode, µs (sum of kernel durations under ncu; share of the first column's total)")
    print(f"{'':34s}" + "".join(f"{lb:>18s}" for lb in labels))
    print(f"{'total':34s}" + "".join(f"{s['total_us']:10.0f} x{s['total_us'] / base:5.2f}  " for s in sums))
    print(f"{'kernels':34s}" + "".join(f"{s['n_kernels']:10d}        " for s in sums))
    for key in ("kind", "family", "role"):
        print(f"-- by {key}")
        names = sorted({n for s in sums for n in s[key]}, key=lambda n: -max(s[key].get(n, 0) for s in sums))
        for n in names:
            cells = "".join(f"{s[key].get(n, 0):10.0f} {100 * s[key].get(n, 0) / base:5.1f}%  " for s in sums)
            print(f"{n[:34]:34s}{cells}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(zip(labels, sums)), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
