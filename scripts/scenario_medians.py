#!/usr/bin/env python3
"""Medians over several runs of `specgate loadgen --scenario …` (their scenario-*.json files).

Per phase (and, for the cold scenario, per class): each configuration's median tokens/s and
the median over runs of learned / best fixed and learned / best single fixed (the one fixed
configuration with the most tokens/s over the whole run). Per request (one at a time): the
median over runs of learned / plain tokens/s for each prompt, the worst of those, and how
many are more than 15% slower than plain.

    python3 scripts/scenario_medians.py results/run*/scenario-shift.json
"""
import json
import statistics
import sys
from collections import defaultdict


def rates(run):
    """{group: {config: tokens/s}} for phases, classes (cold) and the whole scenario."""
    out = defaultdict(dict)
    total = defaultdict(lambda: [0, 0.0])
    for r in run["rows"]:
        out[r["phase"]][r["config"]] = r["tokens_per_second"]
        total[r["config"]][0] += r["tokens"]
        total[r["config"]][1] += r["seconds"]
    for c, (t, s) in total.items():
        out["whole scenario"][c] = t / max(s, 1e-9)
    if run["scenario"] == "cold":
        by = defaultdict(lambda: [0, 0.0])
        for q in run["requests"]:
            s = q["sample"]
            if s["tokens"] > 0:
                by[(s["class"], q["config"])][0] += s["tokens"]
                by[(s["class"], q["config"])][1] += s["e2e"]
        for (cls, c), (t, s) in by.items():
            out["class " + cls][c] = t / max(s, 1e-9)
    return out


def per_request(run):
    speed = defaultdict(dict)
    for q in run["requests"]:
        s = q["sample"]
        if q["concurrency"] <= 1 and s["tokens"] > 0:
            speed[(q["phase"], q["index"])][q["config"]] = s["tokens"] / max(s["e2e"], 1e-9)
    return {k: v["learned"] / v["plain"] for k, v in speed.items() if "learned" in v and "plain" in v}


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    tables = [rates(r) for r in runs]
    groups = list(tables[0].keys())
    configs = sorted({c for t in tables for g in t.values() for c in g})
    fixed = [c for c in configs if c != "learned"]
    print(f"{len(runs)} runs\n")
    print("| group | " + " | ".join(configs) + " | learned / best fixed | learned / best single fixed |")
    print("|---|" + "---|" * (len(configs) + 2))
    for g in groups:
        med = {c: statistics.median(t[g].get(c, 0.0) for t in tables) for c in configs}
        vs_best, vs_single = [], []
        for t in tables:
            best = max(t[g].get(c, 0.0) for c in fixed)
            single = max(fixed, key=lambda c: t["whole scenario"].get(c, 0.0))
            vs_best.append(t[g]["learned"] / max(best, 1e-9))
            vs_single.append(t[g]["learned"] / max(t[g].get(single, 0.0), 1e-9))
        cells = " | ".join(f"{med[c]:.1f}" for c in configs)
        print(f"| {g} | {cells} | {statistics.median(vs_best):.2f} | {statistics.median(vs_single):.2f} |")
    ratios = defaultdict(list)
    for r in runs:
        for k, v in per_request(r).items():
            ratios[k].append(v)
    if ratios:
        med = [statistics.median(v) for v in ratios.values()]
        slow = sum(1 for m in med if m < 1 / 1.15)
        print(f"\nPer request (median over runs of learned / plain): worst {min(med):.2f}, "
              f"median {statistics.median(med):.2f}; {slow} of {len(med)} more than 15% slower.")
    # What any plan could reach with these configurations: the best fixed one per phase
    # (tokens over the phases' best times), and per request where requests ran one at a time.
    per_phase, per_req = [], []
    for r, t in zip(runs, tables):
        single = max(fixed, key=lambda c: t["whole scenario"].get(c, 0.0))
        rows = defaultdict(dict)
        for x in r["rows"]:
            rows[x["phase"]][x["config"]] = x
        tokens = sum(rows[p][single]["tokens"] for p in rows)
        best_secs = sum(min(rows[p][c]["seconds"] * rows[p][single]["tokens"] / max(rows[p][c]["tokens"], 1)
                            for c in fixed) for p in rows)
        per_phase.append(tokens / best_secs / t["whole scenario"][single])
        reqs = defaultdict(dict)
        for q in r["requests"]:
            if q["concurrency"] <= 1 and q["sample"]["tokens"] > 0:
                reqs[(q["phase"], q["index"])][q["config"]] = q["sample"]
        tok = sum(v[single]["tokens"] for v in reqs.values() if single in v)
        own = sum(v[single]["e2e"] for v in reqs.values() if single in v)
        best = sum(min(v[c]["e2e"] * v[single]["tokens"] / max(v[c]["tokens"], 1) for c in fixed if c in v)
                   for v in reqs.values() if single in v)
        if best > 0:
            per_req.append(own / best)
    print(f"\nAn oracle over the fixed configurations, against the best single one: best per phase "
          f"{statistics.median(per_phase):.2f}x" + (f", best per request (one-at-a-time requests) "
          f"{statistics.median(per_req):.2f}x" if per_req else ""))
    singles = [max(fixed, key=lambda c: t["whole scenario"].get(c, 0.0)) for t in tables]
    print(f"\nBest single fixed configuration per run: {', '.join(singles)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
