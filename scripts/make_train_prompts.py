#!/usr/bin/env python3
"""Widen the Medusa heads' training prompts (strategies/data/medusa/train_prompts.jsonl).

The hand-written prompts are mostly chat (505 of 633): the heads learned chat and little
else. This adds prompts mined from text every machine here has, seeded so a rerun on the
same files gives the same output:

- code_edit: small functions from the Python standard library and from the Rust crates in
  the cargo registry, each with an editing or explaining instruction;
- rag: paragraphs of Python module docstrings and crate READMEs as passages, with a
  question to answer from the passage;
- creative and chat: templates over hand-picked subjects.

Anything touching a topic of the benchmark prompts (tests/fixtures/prompts) is dropped, so
`bench spec` still measures the heads on text they were not trained on. Mined prompts are
tagged "mined": true; a rerun replaces them and keeps the hand-written ones.

Usage: python3 scripts/make_train_prompts.py [--per-class N]
"""

import argparse
import ast
import glob
import json
import os
import random
import re
import sys
import sysconfig

OUT = "strategies/data/medusa/train_prompts.jsonl"
FIXTURES = "tests/fixtures/prompts"

CODE_EDITS = [
    "Add a docstring to this function and return the whole function:",
    "Rename the local variables in this function to clearer names. Return only the code:",
    "Add type hints to this Python function and return the whole function:",
    "Explain what this function does, step by step:",
    "Rewrite this function so it is shorter, keeping its behaviour. Return only the code:",
    "Add comments to this code and return the full code:",
    "Write a unit test for this function:",
    "Convert this function to JavaScript:",
]
RUST_EDITS = [
    "Add a doc comment to this Rust function and return the whole function:",
    "Explain what this Rust function does:",
    "Rename the variables in this Rust function to clearer names. Return only the code:",
    "Rewrite this Rust function in Python:",
    "Add comments to this Rust code and return the full code:",
]
RAG_FORMS = [
    "Answer the question using only the passage, quoting it.\nPassage: {p}\nQuestion: {q}",
    "Using the passage, answer the question.\nPassage: {p}\nQuestion: {q}",
    "Read the passage and answer with a quote from it.\nPassage: {p}\nQuestion: {q}",
    "Answer from the passage only.\nPassage: {p}\nQuestion: {q}",
]
RAG_QUESTIONS = [
    "What is the main point of the passage?",
    "Summarize the passage in one sentence.",
    "What does the passage say about {t}?",
    "According to the passage, what is {t} used for?",
    "List two facts the passage states.",
]
SUBJECTS = """a lighthouse keeper, an old bicycle, a mountain village, a lost umbrella, a city bus,
a baker at dawn, a winter market, a sleepy cat, a kite festival, an abandoned train station,
a tiny island, a clockmaker, a library at midnight, a desert caravan, a paper boat,
a street musician, an apple orchard, a fishing boat, a night nurse, a hot air balloon,
a forgotten letter, a garden snail, a thunderstorm, the first day of school, a violin,
grandmother's kitchen, a chess player, a snowy forest, a market in Marrakesh,
a lonely astronaut, a river otter, a bookshop, a mapmaker, a summer fair, an old photograph,
a bridge at dusk, a beekeeper, an owl, a foggy harbour, a carpenter, a jazz club,
a traveling circus, a sunflower field, a potter's wheel, a wooden boat, a runaway balloon,
a school play, a night train, a secret tunnel, a candle maker, a volcano, a fox in the snow,
a pocket watch, a cloud that wanted to rain, a marathon runner, a village well, a weather vane,
a tea ceremony, a magic key, a quiet museum, a glass of lemonade""".split(",")
CREATIVE_FORMS = [
    "Write a short story about {s}.",
    "Write a short poem about {s}.",
    "Write the opening paragraph of a story about {s}.",
    "Tell me a story about {s}.",
    "Describe {s} in vivid detail.",
    "Write a haiku about {s}.",
    "Write a diary entry from the point of view of {s}.",
]
CHAT_TOPICS = """compound interest, a sourdough starter, jet lag, a credit score, time zones, the immune
system, recycling plastic, a mortgage, noise-cancelling headphones, public speaking, learning a
language, a vegetable garden, a job interview, budgeting, a marathon, meditation, tides,
composting, a camera's aperture, password managers, solar panels, electric cars, a sprained
ankle, the water cycle, inflation, vaccines, a resume, first aid for burns, houseplant
watering, a bicycle tyre, a spreadsheet formula, the moon's phases, earthquakes, a healthy
breakfast, a road trip, remote meetings, a library card, stretching, bread baking, birdwatching,
the metric system, a thesis, cloud storage, a home network, a chess opening, email etiquette""".split(",")
CHAT_FORMS = [
    "Explain {t} in simple terms.",
    "Give me three tips about {t}.",
    "What should a beginner know about {t}?",
    "What are common mistakes people make with {t}?",
    "How would you explain {t} to a child?",
    "Give me a short checklist for {t}.",
]


def benchmark_words():
    """Content words of the benchmark prompts (topics to keep out of training)."""
    common = set(
        "answer passage question quote quoting using write return function whole short story "
        "about explain simple terms their there which would could should these those where "
        "while other first after before without within python javascript variable rename "
        "convert syntax values return output result string number".split()
    )
    words = set()
    for path in glob.glob(os.path.join(FIXTURES, "*.jsonl")):
        for line in open(path, encoding="utf-8"):
            text = json.loads(line)["prompt"].lower()
            words.update(w for w in re.findall(r"[a-z]{6,}", text) if w not in common)
    return words


def clean(text):
    return re.sub(r"\s+", " ", text).strip()


def python_functions(rng, limit):
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(root, "*.py")))
    rng.shuffle(files)
    for path in files:
        try:
            source = open(path, encoding="utf-8").read()
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            code = ast.get_source_segment(source, node) or ""
            lines = code.splitlines()
            if 4 <= len(lines) <= 14 and '"""' not in code and "'''" not in code:
                yield node.name, code
                limit -= 1
                if limit <= 0:
                    return
                break  # one per module: variety


RUST_FN = re.compile(r"^(?:pub )?fn \w+[^{;]*\{\n(?:    .*\n|\n){2,10}\}\n", re.M)


def rust_functions(rng, limit):
    files = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/*/src/*.rs")))
    rng.shuffle(files)
    for path in files:
        try:
            source = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        found = [m.group(0) for m in RUST_FN.finditer(source) if "unsafe" not in m.group(0)]
        if found:
            yield rng.choice(found).rstrip()
            limit -= 1
            if limit <= 0:
                return


def paragraphs(rng):
    """Prose paragraphs (100-500 characters) from module docstrings and crate READMEs."""
    out = []
    root = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(root, "*.py"))):
        try:
            doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        out += [clean(p) for p in doc.split("\n\n")]
    for path in sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/*/README.md"))):
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        out += [clean(p) for p in text.split("\n\n") if not p.lstrip().startswith(("#", "`", "[", "<", "|", "!", "-", "*"))]
    prose = [p for p in out if 100 <= len(p) <= 500 and p.count(" ") >= 15 and ">>>" not in p]
    rng.shuffle(prose)
    return prose


def subject_of(passage):
    """A term the passage is about: its most frequent word of 5+ letters."""
    words = re.findall(r"[A-Za-z_]{5,}", passage)
    if not words:
        return "it"
    return max(sorted(set(words)), key=words.count)


def mined(per_class, rng, banned):
    def ok(text):
        return not (set(re.findall(r"[a-z]{6,}", text.lower())) & banned)

    out = []
    for name, code in python_functions(rng, per_class):
        prompt = f"{rng.choice(CODE_EDITS)}\n```python\n{code}\n```"
        if ok(code):
            out.append(("code_edit", prompt))
    for code in rust_functions(rng, per_class // 2):
        if ok(code):
            out.append(("code_edit", f"{rng.choice(RUST_EDITS)}\n```rust\n{code}\n```"))
    for p in paragraphs(rng)[:per_class]:
        q = rng.choice(RAG_QUESTIONS).format(t=subject_of(p))
        if ok(p):
            out.append(("rag", rng.choice(RAG_FORMS).format(p=p, q=q)))
    pairs = [(f, clean(s)) for f in CREATIVE_FORMS for s in SUBJECTS]
    rng.shuffle(pairs)
    out += [("creative", f.format(s=s)) for f, s in pairs[:per_class] if ok(s)]
    pairs = [(f, clean(t)) for f in CHAT_FORMS for t in CHAT_TOPICS]
    rng.shuffle(pairs)
    out += [("chat", f.format(t=t)) for f, t in pairs[:per_class] if ok(t)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-class", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    kept = [json.loads(l) for l in open(OUT, encoding="utf-8") if l.strip()]
    kept = [r for r in kept if not r.get("mined")]
    new = mined(args.per_class, random.Random(args.seed), benchmark_words())
    with open(OUT, "w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r) + "\n")
        for cls, prompt in new:
            f.write(json.dumps({"class": cls, "mined": True, "prompt": prompt}) + "\n")
    counts = {}
    for cls, _ in new:
        counts[cls] = counts.get(cls, 0) + 1
    print(f"{len(kept)} hand-written prompts kept, {len(new)} mined: {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
