#!/usr/bin/env python3
"""Plain decode speed of specgate beside llama.cpp (llama-cpp-python) on the same GGUF, runs
interleaved so drift in machine speed hits both alike; medians reported.

    pip install llama-cpp-python numpy
    cargo build --release
    python3 scripts/bench_vs_llama_cpp.py models/gemma-3-270m-q4_k_m.gguf --runs 5

Each run: specgate's `bench decode --runs 1` (a 128-token prompt, then greedy decoding one
token at a time), then llama.cpp doing the same with the same prompt ids, 2 threads each.
--no-extra-buffers turns off llama.cpp's repacked / AMX weights (they crash on Gemma 3 270M
with llama-cpp-python 0.3.36 on an AMX CPU).
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BENCH_TEXT = ("The harbour town woke before dawn. Fishermen checked their nets, "
              "bakers lit their ovens, and the old lighthouse keeper climbed the spiral stairs one last time. "
              "He had kept the light burning for forty years, through storms that tore roofs from houses and "
              "winters so cold the bay froze solid. Tomorrow a machine would take his place. ")


def llama_cpp_run(llm, prompt, n):
    llm.reset()
    t = time.perf_counter()
    llm.eval(prompt)
    prompt_tps = len(prompt) / (time.perf_counter() - t)
    nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t = time.perf_counter()
    for _ in range(n - 1):
        llm.eval([nxt])
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return prompt_tps, (n - 1) / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--no-extra-buffers", action="store_true")
    args = ap.parse_args()
    if args.no_extra_buffers:
        default = llama_cpp.llama_model_default_params

        def params():
            p = default()
            p.use_extra_bufts = False
            return p
        llama_cpp.llama.llama_cpp.llama_model_default_params = params
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_threads=2, n_batch=512,
                          logits_all=True, verbose=False)
    ids = llm.tokenize(BENCH_TEXT.encode(), add_bos=False, special=False)
    bos = [llm.token_bos()] if llm.metadata.get("tokenizer.ggml.add_bos_token") == "true" else []
    prompt = (bos + ids * 4)[:128]
    ours, theirs = [], []
    for run in range(args.runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([str(ROOT / "target/release/specgate"), "bench", "decode", "--model",
                            args.model, "--runs", "1", "--tokens", str(args.tokens), "--json",
                            f.name], check=True, stdout=subprocess.DEVNULL)
            report = json.load(open(f.name))
        ours.append((report["ours_prompt_tps"][0], report["ours_decode_tps"][0]))
        theirs.append(llama_cpp_run(llm, prompt, args.tokens))
        print(f"run {run}: specgate {ours[-1][1]:.1f} tok/s decode, {ours[-1][0]:.1f} prompt; "
              f"llama.cpp {theirs[-1][1]:.1f} decode, {theirs[-1][0]:.1f} prompt", flush=True)
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"\n| engine | decode tok/s (median of {args.runs}) | prompt tok/s (median) |")
    print("|---|---|---|")
    print(f"| specgate | {med(ours, 1):.1f} | {med(ours, 0):.1f} |")
    print(f"| llama.cpp {llama_cpp.__version__} | {med(theirs, 1):.1f} | {med(theirs, 0):.1f} |")
    print(f"| ratio | {med(ours, 1) / med(theirs, 1):.2f}x | {med(ours, 0) / med(theirs, 0):.2f}x |")


if __name__ == "__main__":
    main()
