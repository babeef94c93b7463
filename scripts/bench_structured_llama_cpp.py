"""llama.cpp on specgate's structured-output benchmark: the same requests
(tests/fixtures/structured/bench.json), the same prompts (the ChatML template and the tools
prompt specgate writes), greedy, decoded without and with the equivalent GBNF grammar
(llama.cpp's own JSON-schema converter; a tool call is `<tool_call>\\n` + JSON
`{"name", "arguments"}` + `\\n</tool_call>`, as specgate's grammar writes it). Reports decode
tokens/s (llama.cpp's own eval counters, so the prompt's pass is left out), medians over
repeats, to set beside `specgate bench structured`.

Usage: python3 scripts/bench_structured_llama_cpp.py MODEL.gguf [--repeats 3] [--threads 2]
Needs llama-cpp-python (0.3.36 was used); not needed by CI.
"""

import argparse
import json
import statistics
from pathlib import Path

import llama_cpp
from llama_cpp import Llama, LlamaGrammar
from llama_cpp.llama_grammar import json_schema_to_gbnf

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def tools_prompt(tools):
    """specgate's src/constraint/tools.rs tools_prompt, byte for byte."""
    s = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
    for t in tools:
        f = {"name": t["name"], "parameters": t["parameters"]}
        if t.get("description") is not None:
            f["description"] = t["description"]
        s += "\n" + json.dumps({"type": "function", "function": f}, separators=(",", ":"), ensure_ascii=False)
    s += ("\n</tools>\n\nFor each function call, return a json object with function name and "
          "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
          "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
    return s


def chatml(system, user):
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def request(r):
    """(prompt text, GBNF) of one benchmark request."""
    if "schema" in r:
        return chatml(DEFAULT_SYSTEM, r["prompt"]), json_schema_to_gbnf(json.dumps(r["schema"]))
    calls = {"anyOf": [{"type": "object", "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                        "required": ["name", "arguments"], "additionalProperties": False} for t in r["tools"]]}
    gbnf = json_schema_to_gbnf(json.dumps(calls)).replace("root ::=", "call ::=", 1)
    gbnf = 'root ::= "<tool_call>\\n" call "\\n</tool_call>"\n' + gbnf
    return chatml(tools_prompt(r["tools"]), r["prompt"]), gbnf


def decode_rate(llm, ids, grammar, max_tokens):
    ctx = llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    llm.reset()
    out = llm.create_completion(ids, max_tokens=max_tokens, temperature=0.0, grammar=grammar)
    perf = llama_cpp.llama_perf_context(ctx)
    return perf.n_eval, perf.t_eval_ms / 1e3, out["choices"][0]["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--requests", default=str(ROOT / "tests/fixtures/structured/bench.json"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    a = ap.parse_args()
    llm = Llama(model_path=a.model, n_ctx=2048, n_threads=a.threads, n_batch=512, verbose=False,
                use_extra_bufts=False)
    reqs = json.load(open(a.requests))
    totals = {"free": [0, 0.0], "gbnf": [0, 0.0]}
    ratios = []
    for rep in range(a.repeats):
        for r in reqs:
            text, gbnf = request(r)
            ids = llm.tokenize(text.encode(), add_bos=False, special=True)
            g = LlamaGrammar.from_string(gbnf, verbose=False)
            fn, fs, _ = decode_rate(llm, ids, None, a.max_tokens)
            cn, cs, out = decode_rate(llm, ids, g, a.max_tokens)
            for key, n, secs in (("free", fn, fs), ("gbnf", cn, cs)):
                totals[key][0] += n
                totals[key][1] += secs
            ratios.append((cn / cs) / (fn / fs))
            if rep == 0:
                print(f"{r['name']}: {cn} tokens, {cn / cs:.1f} tok/s with GBNF, {fn / fs:.1f} without: {out!r}")
    rate = {k: n / secs for k, (n, secs) in totals.items()}
    print("| llama.cpp | decode tokens/s | median ratio |")
    print("|---|---|---|")
    print(f"| unconstrained | {rate['free']:.1f} | 1.00 |")
    print(f"| GBNF grammar | {rate['gbnf']:.1f} | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
