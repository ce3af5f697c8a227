"""pymtp against llama-cpp-python's own build, side by side, round-robin, on one GGUF (CPU or GPU).

What a Python user would otherwise run is llama-cpp-python 0.3.36 built from its sdist with its own llama.cpp
(pip install llama-cpp-python==0.3.36): that is the baseline. Every configuration lives in its own worker
process (two libllamas never share a process), loaded once like an application that keeps its model; the
driver sends each prompt to every worker in turn, rotating which goes first, and times each request end to
end (prompt processing included) from the driver's side.

Configurations (--configs, comma-separated):
  lcp          llama_cpp.Llama of the own build (--lcp-path: a directory holding that llama_cpp package)
  pymtp        pymtp.Model, the default a user gets (MTP auto, adaptive draft length)
  pymtp-off    pymtp.Model(mtp="off"): plain decoding through pymtp's library
  pymtp:k=N    pymtp.Model with a fixed draft length N
  dropin       pymtp.llama_cpp.Llama (llama-cpp-python's Python on pymtp's library, --dropin-path), MTP default
  dropin-off   the same with mtp="off"

  python bench/vs_llama_cpp_python.py --lcp-path /work/lcp-own \\
      --dropin-path ~/.cache/pymtp/llama-cpp-python-0.3.36-server --configs lcp,pymtp,pymtp-off \\
      --requests 16 -n 128 --threads 2 --out res.json

The model is the built-in SmolLM2-135M-Instruct unless given (its shipped MTP head rides with pymtp's rows).
Greedy (T=0) by default: the texts of every row are compared with lcp's and the JSON says where they differ.
pymtp.Model's texts may differ from lcp's even with MTP off: llama-cpp-python 0.3.36 turns flash attention off by
default (`flash_attn=False`) and pymtp's engine takes llama.cpp's default (auto: on on the CPU), so the two attend
with different kernels; the dropin rows pass llama-cpp-python's setting on and match lcp's texts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r'''
import json, os, sys, time
kind, model, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t0 = time.perf_counter()
if kind in ("lcp", "dropin"):
    if kind == "lcp":
        from llama_cpp import Llama
        llm = Llama(model, n_ctx=opts["ctx"], n_threads=opts["threads"], n_threads_batch=opts["threads"],
                    n_gpu_layers=opts["ngl"], verbose=False)
    else:
        from pymtp.llama_cpp import Llama
        kw = {"mtp": opts["mtp"]}
        if opts.get("head"):
            kw["mtp_head"] = opts["head"]
        if opts.get("k") is not None:
            kw["n_draft"] = opts["k"]
        llm = Llama(model, n_ctx=opts["ctx"], n_threads=opts["threads"], n_threads_batch=opts["threads"],
                    n_gpu_layers=opts["ngl"], verbose=False, **kw)

    def gen(p):
        r = llm.create_chat_completion(messages=[{"role": "user", "content": p}], max_tokens=opts["n"],
                                       temperature=opts["temp"], seed=opts["seed"])
        return r["choices"][0]["message"]["content"], r["usage"]["completion_tokens"], getattr(llm, "mtp_stats", None)
else:
    import pymtp
    kw = {"mtp": opts["mtp"]}
    if opts.get("k") is not None:
        kw["n_draft"] = opts["k"]
    m = pymtp.Model(None if opts["builtin"] else model, n_ctx=opts["ctx"], n_threads=opts["threads"],
                    n_gpu_layers=opts["ngl"], **kw)

    def gen(p):
        c = m.chat([{"role": "user", "content": p}], max_tokens=opts["n"], temperature=opts["temp"], seed=opts["seed"])
        return c.text, len(c.tokens), c.stats.to_dict()
print(json.dumps({"ready": time.perf_counter() - t0}), flush=True)
for line in sys.stdin:
    p = json.loads(line)
    t = time.perf_counter()
    text, n, stats = gen(p)
    print(json.dumps({"wall": time.perf_counter() - t, "n": n, "text": text, "stats": stats}), flush=True)
'''


def parse_config(text: str) -> dict:
    kind, _, rest = text.partition(":")
    c = {"label": text, "kind": kind, "k": None}
    if kind not in ("lcp", "pymtp", "pymtp-off", "dropin", "dropin-off"):
        sys.exit(f"--configs: unknown kind {kind!r} in {text!r} (lcp, pymtp, pymtp-off, dropin, dropin-off)")
    for opt in filter(None, rest.split(":")):
        name, eq, value = opt.partition("=")
        if name != "k" or not eq:
            sys.exit(f"--configs: unknown option {opt!r} in {text!r} (k=N)")
        c["k"] = value if value == "auto" else int(value)
    return c


def prompts(n: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from pymtp.bench.prompts import load_prompts  # MT-Bench first turns from the package registry

    ps = load_prompts("mtbench")
    return [ps[i % len(ps)] for i in range(n)]


def start(c: dict, a, model: str) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("LLAMA_CPP_LIB_PATH", None)
    kind = c["kind"]
    if kind == "lcp":
        env["PYTHONPATH"] = str(Path(a.lcp_path).expanduser())
    else:
        from pymtp._native.lib import lib_dir

        paths = [str(ROOT)]
        if kind.startswith("dropin"):
            paths.insert(0, str(Path(a.dropin_path).expanduser()))
            env["LLAMA_CPP_LIB_PATH"] = str(lib_dir())
        env["PYTHONPATH"] = os.pathsep.join(paths)
    off = kind.endswith("-off")
    opts = {"ctx": a.ctx, "threads": a.threads, "ngl": a.ngl, "n": a.n, "temp": a.temp, "seed": a.seed,
            "mtp": "off" if off else "auto", "k": c["k"], "builtin": a.model is None, "head": a.head}
    if kind.startswith("dropin") and a.model is None and not a.head:
        from pymtp.default_model import SHIPPED_HEAD

        opts["head"] = str(SHIPPED_HEAD)
    kind = "dropin" if kind.startswith("dropin") else kind
    p = subprocess.Popen([sys.executable, "-c", WORKER, kind, model, json.dumps(opts)], env=env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
    ready = json.loads(p.stdout.readline() or "null")
    if not ready:
        sys.exit(f"worker {c['label']} failed to start (its stderr is above)")
    c["load_s"] = ready["ready"]
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None, help="a .gguf (default: the built-in SmolLM2-135M-Instruct)")
    ap.add_argument("--configs", default="lcp,pymtp,pymtp-off")
    ap.add_argument("--lcp-path", required=True, help="directory holding llama-cpp-python's own build (llama_cpp/)")
    ap.add_argument("--dropin-path", default="~/.cache/pymtp/llama-cpp-python-0.3.36-server",
                    help="directory holding llama-cpp-python's Python built without its library (dropin rows)")
    ap.add_argument("--head", default=None, help="an MTP head file for the dropin rows (default: the shipped one)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("-n", type=int, default=128, help="max tokens per answer")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    configs = [parse_config(t) for t in a.configs.split(",")]
    if a.requests < 1:
        sys.exit("--requests must be >= 1")
    model = a.model
    if model is None:
        sys.path.insert(0, str(ROOT))
        from pymtp.default_model import default_model_path

        model = str(default_model_path())
    ps = prompts(a.requests)
    workers = [start(c, a, model) for c in configs]
    rows = {c["label"]: [] for c in configs}
    for i, p in enumerate(ps):
        order = [(i + j) % len(configs) for j in range(len(configs))]
        for j in order:
            c, w = configs[j], workers[j]
            t = time.perf_counter()
            w.stdin.write(json.dumps(p) + "\n")
            w.stdin.flush()
            r = json.loads(w.stdout.readline())
            r["e2e"] = time.perf_counter() - t
            rows[c["label"]].append(r)
        print(f"  request {i + 1}/{len(ps)}: " + "  ".join(
            f"{c['label']} {rows[c['label']][-1]['n'] / rows[c['label']][-1]['e2e']:.1f} tok/s" for c in configs),
            file=sys.stderr)
    for w in workers:
        w.stdin.close()
        w.wait(timeout=60)
    base = configs[0]["label"]
    summary = {}
    for c in configs:
        rs = rows[c["label"]]
        tok, wall = sum(r["n"] for r in rs), sum(r["e2e"] for r in rs)
        per = sorted((rb["e2e"] / rb["n"]) / (r["e2e"] / r["n"]) for r, rb in zip(rs, rows[base]) if r["n"] and rb["n"])
        summary[c["label"]] = {
            "tok_s": tok / wall, "vs_" + base: (tok / wall) / (sum(r["n"] for r in rows[base]) /
                                                   sum(r["e2e"] for r in rows[base])),
            "median_request_ratio": per[len(per) // 2] if per else None, "load_s": c["load_s"],
            "mean_e2e_s": wall / len(rs), "tokens": tok,
            "texts_equal_" + base: sum(r["text"] == rb["text"] for r, rb in zip(rs, rows[base])),
        }
    print(f"\n{'config':<16}{'tok/s':>9}{'vs ' + base:>10}{'median':>9}{'load s':>8}{'same text':>11}")
    for label, s in summary.items():
        print(f"{label:<16}{s['tok_s']:>9.1f}{s['vs_' + base]:>9.3f}x{s['median_request_ratio']:>8.3f}x"
              f"{s['load_s']:>8.2f}{s['texts_equal_' + base]:>7}/{a.requests}")
    if a.out:
        rec = {"argv": sys.argv, "model": model, "machine": platform.processor() or platform.machine(),
               "nproc": os.cpu_count(), "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                                                 capture_output=True, text=True).stdout.strip(),
               "date": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": summary, "rows": rows,
               "configs": configs}
        Path(a.out).write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
