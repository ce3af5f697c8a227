#!/usr/bin/env python3
"""Pristine upstream llama-server (--spec-type draft-mtp) vs pymtp's (--mtp), same model, A/B.

Builds llama-server from the pinned llama.cpp tree WITHOUT pymtp's patches (once, into
build/upstream-<backend>/), then runs three servers on the same GGUF, prompts, draft length and
hardware: plain (no speculation, upstream binary), upstream draft-mtp, and pymtp --mtp
(adaptive drafting off, so every step drafts, like upstream). Requests go round-robin over the
three, prompt by prompt, so machine drift hits all alike; the report gives tok/s, the ratio of each
to plain, and pymtp / upstream.

    python bench/upstream_vs_pymtp.py MODEL.gguf [--n-draft 3] [--prompts mtbench] [--requests 16]
        [-n 128] [--temp 0] [--draft greedy] [--ngl 0] [--threads N] [--cuda] [--out r.json]
        [--synthetic-rates 0.917,0.837,0.648] [--upstream-bin PATH] [--serial]

MODEL must be an architecture upstream can draft for (glm4moe, deepseek2, qwen35, step35, ...;
not a dense llama/qwen2/qwen3/gemma3 grafted head: only pymtp runs those, compare its modes with
`pymtp bench --modes` instead). With --synthetic-rates both servers accept drafts at random with
these per-position rates (upstream: --spec-synth-rates; pymtp: the same engine option through the
server's synthetic path), so random-weight models of realistic shape measure engine cost.

--upstream-bin uses a pristine llama-server built elsewhere (bench/device/build_cuda.sh builds one
on the GPU box) instead of building it here. --serial runs the three servers one after another
(all prompts each) instead of side by side, for models too large to hold three times in memory;
drift then hits the configurations unequally, so prefer the default when the model fits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def build_upstream(backend: str, jobs: int) -> Path:
    """llama-server from the pinned sdist without patches; cached per backend."""
    import vendor  # scripts/vendor.py: the same sdist, sha256-checked

    out = ROOT / "build" / f"upstream-{backend}"
    exe = out / "bin" / "llama-server"
    if exe.is_file():
        return exe
    src = out / "src"
    if not (src / "CMakeLists.txt").is_file():
        shutil.rmtree(src, ignore_errors=True)
        vendor.extract_tree(vendor.fetch_sdist(), src)
    args = ["cmake", "-S", str(src), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"]
    if backend == "cuda":
        args += ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=" + os.environ.get("CUDA_ARCH", "90")]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    print(f"building pristine upstream llama-server ({backend}) in {out} ...", file=sys.stderr)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(out), "--target", "llama-server", "-j", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    return exe



def parse_env(text: str, flag: str) -> dict[str, str]:
    """'A=1 B=2' -> {'A': '1', 'B': '2'}; exits with a clear message on a word without '='."""
    env = {}
    for word in text.split():
        name, eq, value = word.partition("=")
        if not eq or not name:
            sys.exit(f"{flag}: expected VAR=VALUE words, got {word!r}")
        env[name] = value
    return env


class Server:
    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        from pymtp.server import free_port, start_server, wait_until_ready

        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_dir / f"{name}.log", "wb")
        self.proc = start_server(argv + ["--port", str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})})
        wait_until_ready(self.url, self.proc, timeout=900)

    def complete(self, prompt: str, n: int, temp: float, seed: int, extra: dict) -> dict:
        body = {"prompt": prompt, "n_predict": n, "temperature": temp, "seed": seed, "cache_prompt": False,
                **extra}
        req = urllib.request.Request(self.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=900) as r:
            res = json.loads(r.read())
        res["_wall_s"] = time.perf_counter() - t0
        return res

    def stop(self) -> None:
        from pymtp.server import stop_server

        stop_server(self.proc, timeout=30)
        self.log.close()


def _gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--n-draft", type=int, default=3)
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--draft", default="greedy", help="pymtp draft mode (default: greedy, upstream's way)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cuda", action="store_true", help="build upstream with CUDA (pymtp must be a CUDA build too)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--synthetic-rates", default=None, help="per-position acceptance rates for both servers")
    ap.add_argument("--upstream-bin", default=None,
                    help="a prebuilt pristine llama-server to use instead of building one")
    ap.add_argument("--parallel", type=int, default=1, metavar="N",
                    help="N slots per server (-np N, N x --ctx) and N clients at once; tok/s is then the aggregate: "
                         "all tokens over the wall time of all prompts, two rounds per server, servers in turn")
    ap.add_argument("--serial", action="store_true",
                    help="one server at a time (for models that do not fit three times in memory)")
    ap.add_argument("--log-dir", default=None, help="where the servers' logs go (default: a new temp dir)")
    ap.add_argument("--upstream-extra", default="", metavar="ARGS",
                    help="more arguments for the upstream draft-mtp server, e.g. "
                         "'--no-spec-draft-backend-sampling' (split on spaces)")
    ap.add_argument("--pymtp-extra", default="", metavar="ARGS",
                    help="more arguments for pymtp's server only, e.g. '--mtp-head draft-vocab.gguf' (split on "
                         "spaces)")
    ap.add_argument("--upstream-env", default="", metavar="VAR=VALUE ...",
                    help="environment of the two upstream servers only, e.g. pymtp's ggml-cuda knobs that restore "
                         "upstream's kernels when the pristine server runs on pymtp's ggml libraries")
    ap.add_argument("--pymtp-env", default="", metavar="VAR=VALUE ...", help="environment of the pymtp server only")
    ap.add_argument("--server-extra", default="", metavar="ARGS",
                    help="more arguments for all three servers, e.g. '--split-mode layer' (split on spaces)")
    ap.add_argument("--prefill-tokens", type=int, default=0, metavar="N",
                    help="also time the prompt processing of a ~N-token prompt (3 times per server, 1 token "
                         "generated): prefill tok/s of each configuration")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    # bad input fails here, before a pristine server is built
    if args.parallel < 1:
        sys.exit("--parallel: at least 1")
    if args.parallel > 1 and args.serial:
        sys.exit("--parallel and --serial: choose one")
    upstream_env = parse_env(args.upstream_env, "--upstream-env")
    pymtp_env = parse_env(args.pymtp_env, "--pymtp-env")

    from pymtp.bench.prompts import load_prompts
    from pymtp.server import server_binary

    model = Path(args.model).resolve()
    prompts = load_prompts(args.prompts)[: args.requests]
    if args.upstream_bin:
        upstream = Path(args.upstream_bin).resolve()
        if not upstream.is_file():
            sys.exit(f"--upstream-bin {upstream}: no such file")
    else:
        upstream = build_upstream("cuda" if args.cuda else "cpu", args.jobs)
    common = ["-m", str(model), "-c", str(args.ctx * args.parallel), "-np", str(args.parallel), "--no-webui",
              "--host", "127.0.0.1"]
    if args.ngl:
        common += ["-ngl", str(args.ngl)]
    if args.threads:
        common += ["-t", str(args.threads), "-tb", str(args.threads)]
    common += args.server_extra.split()
    # a long prompt for --prefill-tokens: the prompts themselves, repeated (~0.75 words per token)
    long_prompt = ""
    while len(long_prompt.split()) < 0.75 * args.prefill_tokens:
        long_prompt += " ".join(prompts) + "\n"
    prefill = {name: [] for name in ("plain", "upstream draft-mtp", "pymtp --mtp")}

    def run_prefill(name: str, s: "Server") -> None:
        for rep in range(3 if args.prefill_tokens else 0):
            t = s.complete(long_prompt, 1, 0.0, rep, {})["timings"]
            prefill[name].append({"prompt_n": t["prompt_n"], "prompt_ms": t["prompt_ms"]})
    synth = ["--spec-synth-rates", args.synthetic_rates] if args.synthetic_rates else []
    configs = {
        "plain": [str(upstream), *common],
        "upstream draft-mtp": [str(upstream), *common, "--spec-type", "draft-mtp", "--spec-draft-n-max",
                               str(args.n_draft), *synth, *args.upstream_extra.split()],
        "pymtp --mtp": [str(server_binary()), *common, "--mtp", "--mtp-n-draft", str(args.n_draft),
                        "--mtp-draft", args.draft, "--mtp-adaptive", "off", *synth, *args.pymtp_extra.split()],
    }
    envs = {"plain": upstream_env, "upstream draft-mtp": upstream_env, "pymtp --mtp": pymtp_env}
    if args.log_dir:
        log_dir = Path(args.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
    else:
        log_dir = Path(tempfile.mkdtemp(prefix="pymtp-vs-upstream-"))
    runs = {name: [] for name in configs}
    walls = {name: [] for name in configs}   # --parallel: wall seconds of each round of all prompts

    def record(name: str, r: dict) -> None:
        t = r["timings"]
        runs[name].append({"tokens": t["predicted_n"], "ms": t["predicted_ms"], "text": r["content"],
                           "prompt_n": t.get("prompt_n", 0), "prompt_ms": t.get("prompt_ms", 0.0),
                           "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0)})

    def run_prompt(name: str, s: Server, i: int, p: str) -> None:
        record(name, s.complete(p, args.n, args.temp, i, {}))

    def run_round(name: str, s: Server) -> None:
        """All prompts through args.parallel clients at once (--parallel)."""
        import concurrent.futures as cf

        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.parallel) as ex:
            res = list(ex.map(lambda ip: s.complete(ip[1], args.n, args.temp, ip[0], {}), enumerate(prompts)))
        walls[name].append(time.perf_counter() - t0)
        for r in res:
            record(name, r)

    if args.serial:
        for name, argv in configs.items():
            s = Server(name.split()[0], argv, log_dir, envs[name])
            try:
                s.complete(prompts[0], 8, 0.0, 0, {})  # warm-up
                for i, p in enumerate(prompts):
                    run_prompt(name, s, i, p)
                run_prefill(name, s)
                print(f"  {name}: {len(prompts)} prompts", file=sys.stderr)
            finally:
                s.stop()
    else:
        servers = {}
        try:
            for name, argv in configs.items():
                servers[name] = Server(name.split()[0], argv, log_dir, envs[name])
            for s in servers.values():  # warm-up
                s.complete(prompts[0], 8, 0.0, 0, {})
            order = list(servers.items())
            if args.parallel > 1:   # two rounds of all prompts per server, servers in turn
                for rnd in range(2):
                    for name, s in order[rnd % len(order):] + order[: rnd % len(order)]:
                        run_round(name, s)
                        print(f"  round {rnd + 1}, {name}: {walls[name][-1]:.1f} s", file=sys.stderr)
            else:                   # prompt by prompt, rotating who goes first
                for i, p in enumerate(prompts):
                    for name, s in order[i % len(order):] + order[: i % len(order)]:
                        run_prompt(name, s, i, p)
                    print(f"  prompt {i + 1}/{len(prompts)}", file=sys.stderr)
            for name, s in servers.items():
                run_prefill(name, s)
        finally:
            for s in servers.values():
                s.stop()

    def tps(name):
        if args.parallel > 1:   # aggregate: every token over the wall time of the rounds
            return sum(x["tokens"] for x in runs[name]) / sum(walls[name])
        return sum(x["tokens"] for x in runs[name]) / (sum(x["ms"] for x in runs[name]) / 1e3)

    base = tps("plain")
    result = {"model": str(model), "machine": platform.processor() or platform.machine(), "args": vars(args),
              "upstream_bin": str(upstream), "pymtp_bin": str(server_binary()), "gpu": _gpu_name(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "log_dir": str(log_dir), "configs": {}}
    def prefill_tps(rows):
        ms = sum(x["prompt_ms"] for x in rows)
        return sum(x["prompt_n"] for x in rows) / (ms / 1e3) if ms > 0 else 0.0

    long_n = prefill["plain"][0]["prompt_n"] if prefill["plain"] else 0
    print(f"\n{'config':<20} {'tok/s':>8} {'vs plain':>9} {'accepted/drafted':>17} {'prefill tok/s':>14}"
          + (f" {f'prefill {long_n}':>14} {'vs plain':>9}" if long_n else ""))
    base_long = prefill_tps(prefill["plain"])
    for name in runs:
        d = sum(x["draft_n"] for x in runs[name])
        a = sum(x["draft_n_accepted"] for x in runs[name])
        result["configs"][name] = {"tok_s": tps(name), "vs_plain": tps(name) / base, "drafted": d, "accepted": a,
                                   "prefill_tok_s": prefill_tps(runs[name]),
                                   "long_prefill_tok_s": prefill_tps(prefill[name]), "long_prefill": prefill[name],
                                   "per_prompt_ratio_vs_plain": [
                                       (x["tokens"] / x["ms"]) / (y["tokens"] / y["ms"])
                                       for x, y in zip(runs[name], runs["plain"])]}
        line = f"{name:<20} {tps(name):>8.1f} {tps(name) / base:>8.2f}x {a:>8}/{d:<8} {prefill_tps(runs[name]):>14.1f}"
        if long_n:
            lp = prefill_tps(prefill[name])
            line += f" {lp:>14.1f} {lp / base_long:>8.2f}x"
        print(line)
    ratio = tps("pymtp --mtp") / tps("upstream draft-mtp")
    result["pymtp_vs_upstream"] = ratio
    # (plain is the upstream binary, whose CPU kernels are not batch-size invariant, so its greedy text
    # may differ from any speculative run's; pymtp's own identity with MTP off is tested in tests/)
    same = sum(x["text"] == y["text"] for x, y in zip(runs["pymtp --mtp"][: len(prompts)],
                                                     runs["upstream draft-mtp"][: len(prompts)]))
    result["pymtp_texts_equal_to_upstream_draft_mtp"] = f"{same}/{len(prompts)}"
    print(f"\npymtp / upstream: {ratio:.2f}x   (texts equal to upstream draft-mtp's: {same}/{len(prompts)})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
