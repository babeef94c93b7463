#!/usr/bin/env python3
"""Make the reference fixtures the Rust tests compare against, with llama.cpp
(llama-cpp-python) loading the same GGUF. Run once and commit the JSON; CI does not need
llama.cpp.

    pip install llama-cpp-python jinja2 numpy
    python3 scripts/make_reference_fixtures.py models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 scripts/make_reference_fixtures.py models/gemma-3-270m-q4_k_m.gguf \
        --completion --out tests/fixtures/gemma3-270m

    truncate -s 20G qwen-header.gguf   # a header whose tensors were cut off, padded
    python3 scripts/make_reference_fixtures.py qwen-header.gguf --tokenizer-only \
        --out tests/fixtures/qwen2-tokenizer

Writes tokenizer_cases.json and greedy_reference.json into tests/fixtures (or --out). A
base model (--completion) gets plain completion prompts, BOS first, and 64 greedy tokens;
its fixture also keeps llama.cpp's 16 largest logits at the first positions of each prompt.

For each prompt it also records where llama.cpp departs from its own default run when only its
arithmetic changes (an f32 KV cache; a prompt fed one token at a time), and llama.cpp's top-2
gap there: the size of near-tie that float rounding alone decides for this quantized model.
"""
import argparse
import hashlib
import json
from pathlib import Path

import jinja2
import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
GREEDY_TOKENS = 128

TOKENIZER_CASES = [
    ("ascii", "Hello, world! This is a plain ASCII sentence."),
    ("numbers", "In 2024 we sold 1234567 units at $19.99 (a 3.5% rise)."),
    ("whitespace", "  leading spaces\tand tabs\n\nand blank lines   "),
    ("code", "def add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b  # TODO: overflow?\n"),
    ("rust", "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{v:?}\"); }"),
    ("accents", "Café, naïve, résumé, Ångström, façade, jalapeño, Zürich."),
    ("portuguese", "Não há ninguém que goste de dor, que a procure e que a queira ter, só porque é dor."),
    ("cjk", "我爱自然语言处理。東京は日本の首都です。한국어도 있어요."),
    ("emoji", "Great job 🎉🚀! Family: 👨‍👩‍👧‍👦, flags: 🇧🇷🇯🇵, skin tone: 👍🏽"),
    ("special", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"),
    ("mixed", "Résumé: 5 años en São Paulo — código `x += 1` 🙂 <|endoftext|>"),
    ("empty", ""),
    ("gemma_turns", "<start_of_turn>user\nWrite <b>bold</b>\t\tcode<end_of_turn>\n<start_of_turn>model\n"),
    ("newlines", "a\n\n\nb\n \n  c\r\n\td"),
]

COMPLETION_PROMPTS = [
    "The lighthouse keeper climbed the stairs every evening, and",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "Paris has been the capital of France since",
    "Photosynthesis is the process by which plants",
    "Ten tips for learning the guitar:\n1.",
    "O mar estava calmo naquela manhã, e",
    "SELECT name, COUNT(*) FROM orders",
    "Once upon a time, a small dragon who was afraid of the dark",
]
TOP_LOGITS = 16
LOGIT_POSITIONS = 4

CHAT_PROMPTS = [
    [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}],
    [{"role": "user", "content": "Write a Python class for a bank account with deposit, withdraw and balance methods, with docstrings."}],
    [{"role": "user", "content": "Describe the history of Paris in detail."}],
    [{"role": "system", "content": "You are a patient teacher."},
     {"role": "user", "content": "Explain how a hash map works, with an example in Java."}],
    [{"role": "user", "content": "Give me ten tips for learning to play the guitar, with a sentence on each."}],
    [{"role": "user", "content": "Escreva um parágrafo longo sobre o mar."}],
    [{"role": "user", "content": "Explain photosynthesis to a ten-year-old."}],
    [{"role": "user", "content": "Write a short story about a dragon who is afraid of the dark."}],
]


def render(template: str, messages) -> str:
    env = jinja2.Environment()
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token="", eos_token="<|im_end|>")


def write_tokenizer_cases(llm, out: Path) -> None:
    """llama.cpp's ids for every tokenizer case, special tokens parsed, no BOS."""
    cases = []
    for name, text in TOKENIZER_CASES:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) if text else []
        cases.append({"name": name, "text": text, "ids": ids})
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer_cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")


def greedy(llm, ids, eos, n_tokens=GREEDY_TOKENS):
    """Greedy ids and llama.cpp's top-2 logit gap at each step."""
    llm.reset()
    llm.eval(ids)
    out, gaps = [], []
    for _ in range(n_tokens):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top2 = np.sort(row)[-2:]
        tok = int(np.argmax(row))
        out.append(tok)
        gaps.append(float(top2[1] - top2[0]))
        if tok == eos:
            break
        llm.eval([tok])
    return out, gaps


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def top_logits(llm, n_prompt):
    """llama.cpp's largest logits at the prompt's last position and the next few (as fed)."""
    rows = []
    for p in range(n_prompt - 1, min(n_prompt - 1 + LOGIT_POSITIONS, llm.n_tokens)):
        row = np.array(llm.scores[p], dtype=np.float32)
        top = np.argsort(row)[-TOP_LOGITS:][::-1]
        rows.append({"position": p, "ids": [int(i) for i in top],
                     "logits": [round(float(row[i]), 5) for i in top]})
    return rows


def without_extra_buffers():
    """llama.cpp's repacked / AMX weight buffers crash (SIGSEGV in decode) on Gemma 3 270M
    on an AMX CPU with llama-cpp-python 0.3.36; the plain CPU path is ggml's reference
    arithmetic anyway."""
    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_cpp.llama_model_default_params = params
    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def logit_spread(models, ids, tops):
    """How far llama.cpp's own variants move its top logits at the recorded positions."""
    rows = []
    for llm in models:
        llm.reset()
        llm.eval(ids)
        rows.append(np.array(llm.scores[:llm.n_tokens], dtype=np.float32))
    spread = 0.0
    for t in tops:
        for other in rows[1:]:
            d = np.abs(other[t["position"]][t["ids"]] - rows[0][t["position"]][t["ids"]])
            spread = max(spread, float(d.max()))
    return round(spread, 5)


def completion_main(model_path: str, out: Path) -> None:
    """A base model: completion prompts, BOS first, 64 greedy tokens, top logits."""
    without_extra_buffers()
    kw = dict(model_path=model_path, n_ctx=1024, logits_all=True, verbose=False)
    llm = llama_cpp.Llama(n_threads=2, n_batch=512, seed=0, **kw)
    variant_models = [
        ("f32_kv_cache", llama_cpp.Llama(n_threads=2, type_k=0, type_v=0, **kw)),
        ("prefill_one_token_at_a_time",
         llama_cpp.Llama(n_threads=1, n_batch=1, n_ubatch=1, **kw)),
    ]
    eos = llm.token_eos()
    write_tokenizer_cases(llm, out)
    prompts = []
    n = 64
    for text in COMPLETION_PROMPTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        output, gaps = greedy(llm, ids, eos, n)
        tops = top_logits(llm, len(ids))
        fed = ids + output[:LOGIT_POSITIONS]
        spread = logit_spread([llm] + [m for _, m in variant_models], fed, tops)
        variants = {}
        for name, llm_variant in variant_models:
            at = first_difference(greedy(llm_variant, ids, eos, n)[0], output)
            variants[name] = None if at is None else {"at": at, "top2_gap": round(gaps[at], 6)}
        prompts.append({"prompt_text": text, "prompt_ids": ids, "output_ids": output,
                        "top2_gaps": [round(g, 6) for g in gaps], "top_logits": tops,
                        "llama_cpp_self_logit_spread": spread,
                        "llama_cpp_self_divergence": variants})
        print(f"{len(output)} tokens, self-divergence {variants}: {llm.detokenize(output)[:40]!r}")
    sha = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
    reference = {"reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, "
                              "extra buffer types (repack, AMX) off",
                 "model_sha256": sha, "greedy_tokens": n, "prompts": prompts}
    (out / "greedy_reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")


def tokenizer_only_main(model_path: str, out: Path) -> None:
    """Token ids only, from a file's vocabulary (vocab_only: a header with its tensors cut
    off loads once padded to its size, e.g. with `truncate -s 20G`)."""
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    write_tokenizer_cases(llm, out)


def main(model_path: str) -> None:
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_threads=2, n_batch=512,
                          logits_all=True, verbose=False, seed=0)
    variant_models = [
        ("f32_kv_cache", llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_threads=2,
                                         logits_all=True, verbose=False, type_k=0, type_v=0)),
        ("prefill_one_token_at_a_time", llama_cpp.Llama(
            model_path=model_path, n_ctx=1024, n_threads=1, n_batch=1, n_ubatch=1,
            logits_all=True, verbose=False)),
    ]
    template = llm.metadata["tokenizer.chat_template"]
    eos = llm.token_eos()

    write_tokenizer_cases(llm, FIX)

    prompts = []
    for messages in CHAT_PROMPTS:
        text = render(template, messages)
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        out, gaps = greedy(llm, ids, eos)
        variants = {}
        for name, llm_variant in variant_models:
            at = first_difference(greedy(llm_variant, ids, eos)[0], out)
            variants[name] = None if at is None else {"at": at, "top2_gap": round(gaps[at], 6)}
        prompts.append({"messages": messages, "prompt_text": text, "prompt_ids": ids,
                        "output_ids": out, "top2_gaps": [round(g, 6) for g in gaps],
                        "llama_cpp_self_divergence": variants})
        print(f"{len(out)} tokens, self-divergence {variants}: {llm.detokenize(out)[:40]!r}")
    reference = {"reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
                 "model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                 "greedy_tokens": GREEDY_TOKENS, "prompts": prompts}
    (FIX / "greedy_reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--completion", action="store_true", help="a base model: completion prompts")
    ap.add_argument("--tokenizer-only", action="store_true", help="token ids only (vocab_only)")
    ap.add_argument("--out", type=Path, default=FIX)
    args = ap.parse_args()
    if args.tokenizer_only:
        tokenizer_only_main(args.model, args.out)
    elif args.completion:
        completion_main(args.model, args.out)
    else:
        main(args.model)
