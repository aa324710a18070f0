#!/usr/bin/env python3
"""Writes the training corpus of models/mnemo-recall: long documents where recall pays.

    /usr/bin/python3 scripts/make_recall_corpus.py OUT_DIR [--variants 3] [--seed 1]

Each document is one package of the Python standard library (its modules in path order, each
behind a `# file: path` line), or a run of top-level modules, cut at file boundaries into
48-160 KB. Into every document go, at line starts:
  * facts: a definition `<prefix><value><suffix>` and, 64 bytes to 64 KB later (log-uniform),
    a recall that repeats the prefix and the value, often after a question. Prefixes come from
    many templates (assignments, dict entries, comments, prose, key: value lines) over random
    names; values are digit strings, hex, words and identifiers of random lengths. Several facts
    with different keys are open at once, so the key must be matched, not the latest value;
  * span repeats: a run of 24-160 bytes copied verbatim from 1 KB to 32 KB earlier.
The value bytes of a recall can only be predicted by retrieving the definition, which is what
the kNN layer is trained for. Every variant draws fresh names and values (the same text is
never paired with the same fact twice).

Files held out by the bundled model (models/mnemo-stdlib/split.json) never enter: evaluation
texts and passkey filler come from them. Deterministic in (sources, --seed, --variants).
"""
import argparse
import json
import math
import os
import random
import string
import sys

ROOT = "/usr/lib/python3.11"

WORDS = ("alpha bravo cedar delta ember falcon garnet harbor indigo juniper kepler lotus maple "
         "nectar onyx pepper quartz raven sierra tango umber velvet willow xenon yarrow zephyr "
         "amber basil cobalt dune fern glacier hazel iris jade kelp lemon meadow nova ocean pine "
         "quill river stone thistle ultra violet wren yucca zinc apple button candle dragon eagle "
         "forest guitar hammer island jacket kettle ladder mirror needle orange pencil rocket "
         "saddle tunnel wallet anchor bridge castle engine garden helmet lantern marble planet "
         "silver timber window").split()

DIGITS = string.digits
HEX = "0123456789abcdef"
ALNUM = string.ascii_uppercase + string.digits


def name(rng):
    """A random identifier-ish key name."""
    style = rng.randrange(6)
    parts = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    if style == 0:
        return "_".join(parts).upper()
    if style == 1:
        return "_".join(parts)
    if style == 2:
        return parts[0] + "".join(p.title() for p in parts[1:])
    if style == 3:
        return " ".join(parts)
    if style == 4:
        return "".join(p.title() for p in parts)
    return "-".join(parts)


def value(rng):
    kind = rng.randrange(8)
    if kind <= 3:  # digit codes are the most common ask
        return "".join(rng.choice(DIGITS) for _ in range(rng.randint(3, 10)))
    if kind == 4:
        return "".join(rng.choice(HEX) for _ in range(rng.randint(4, 16)))
    if kind == 5:
        return "".join(rng.choice(ALNUM) for _ in range(rng.randint(4, 10)))
    if kind == 6:
        return "-".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    return str(rng.randint(0, 99999)) + "." + str(rng.randint(0, 999))


# (definition prefix, definition suffix, recall lead-ins): the recall is
# `<lead-in><prefix><value>` where the prefix is repeated exactly.
def template(rng, key):
    upper = key.upper().replace(" ", "_").replace("-", "_")
    lower = key.lower()
    choices = [
        (f'{upper} = "', '"', ["", "# check\n"]),
        (f"{upper} = ", "", ["", "# again\n"]),
        (f'{lower.replace(" ", "_").replace("-", "_")} = "', '"', ["", "print(", "# restore\n"]),
        (f'config["{lower}"] = "', '"', ["", "# the same setting\n"]),
        (f'    "{lower}": "', '",', ["", "    # copied\n"]),
        (f"# {key}: ", "", ["", "# reminder\n"]),
        (f"{key}: ", "", ["", "Q: what is {key}?\nA: "]),
        (f"The {lower} is ", ".", ["", "What is the {lower}? ", "Question: what was the {lower}?\n"]),
        (f"The pass key for {lower} is ", ". Remember it.",
         ["", "What is the pass key for {lower}? "]),
        (f"the secret {lower} code is ", ".", ["", "Recall: "]),
        (f"{lower} := ", "", [""]),
        (f"<{lower}>", f"</{lower}>", [""]),
        (f"set {lower} to ", "", ["", "earlier we said: "]),
        (f"{upper}=", "", ["", "export "]),
    ]
    prefix, suffix, leads = rng.choice(choices)
    lead = rng.choice(leads).replace("{key}", key).replace("{lower}", lower)
    return prefix, suffix, lead


def line_starts(text):
    starts = [0]
    pos = text.find("\n")
    while pos != -1 and pos + 1 < len(text):
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def random_line(rng):
    """A line no model can predict: only a copy of it can be."""
    body = "".join(rng.choice(ALNUM + string.ascii_lowercase) for _ in range(rng.randint(12, 40)))
    return rng.choice(["# id: ", "token = '", "", "ref ", "checksum: "]) + body + "\n"


def insert_all(text, rng, fact_every=1500, span_every=3000, random_every=0):
    """Returns text with facts, span repeats and repeated random lines inserted at line starts."""
    starts = line_starts(text)
    if len(starts) < 16:
        return text
    inserts = []  # (position in the original text, order, string)
    n = len(text)
    # Facts: one definition every `fact_every` bytes of text.
    for _ in range(max(1, n // fact_every)):
        key = name(rng)
        val = value(rng)
        prefix, suffix, lead = template(rng, key)
        at = rng.choice(starts)
        distance = int(math.exp(rng.uniform(math.log(32), math.log(65536))))
        recall_at = at + distance
        if recall_at >= n:
            continue
        recall_line = next_start(starts, recall_at)
        if recall_line is None:
            continue
        inserts.append((at, 0, f"{prefix}{val}{suffix}\n"))
        tail = suffix if rng.random() < 0.5 else ""
        inserts.append((recall_line, 1, f"{lead}{prefix}{val}{tail}\n"))
    # Random lines, repeated verbatim 32 bytes to 32 KB later.
    for _ in range(n // random_every if random_every else 0):
        line = random_line(rng)
        at = rng.choice(starts)
        distance = int(math.exp(rng.uniform(math.log(32), math.log(32768))))
        dst = next_start(starts, at + distance)
        if dst is None:
            continue
        inserts.append((at, 0, line))
        inserts.append((dst, 1, line))
    # Span repeats: one every `span_every` bytes of text.
    for _ in range(n // span_every):
        src = rng.choice(starts)
        length = rng.randint(24, 160)
        span = text[src:src + length]
        if "\n" not in span[-1:]:
            span = span + "\n"
        distance = int(math.exp(rng.uniform(math.log(1024), math.log(32768))))
        dst = next_start(starts, src + distance)
        if dst is None:
            continue
        inserts.append((dst, 2, span))
    inserts.sort(key=lambda item: (item[0], item[1]))
    out, last = [], 0
    for at, _, s in inserts:
        out.append(text[last:at])
        out.append(s)
        last = at
    out.append(text[last:])
    return "".join(out)


def next_start(starts, position):
    import bisect
    i = bisect.bisect_left(starts, position)
    return starts[i] if i < len(starts) else None


def held_out(repo_root):
    with open(os.path.join(repo_root, "models/mnemo-stdlib/split.json")) as f:
        return set(json.load(f)["validation"])


def groups(root, excluded):
    """Lists (group name, [relative paths]) in path order."""
    by_group = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "test", "tests", "idlelib", "site-packages", "dist-packages"))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            if path in excluded:
                continue
            rel = os.path.relpath(path, root)
            top = rel.split(os.sep)[0] if os.sep in rel else "_top_" + fn[0].lower()
            by_group.setdefault(top, []).append(rel)
    return sorted(by_group.items())


def documents(root, excluded, rng):
    lo, hi = 48_000, 160_000
    for group, rels in groups(root, excluded):
        chunk, size, part = [], 0, 0
        for rel in rels:
            try:
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    body = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            if len(body) > 4 << 20:
                continue
            chunk.append(f"# file: {rel}\n{body}")
            size += len(body)
            if size >= rng.randint(lo, hi):
                yield f"{group}_{part}", "".join(chunk)
                chunk, size, part = [], 0, part + 1
        if chunk:
            yield f"{group}_{part}", "".join(chunk)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--root", default=ROOT)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fact_every", type=int, default=1500, help="bytes of text per fact")
    parser.add_argument("--span_every", type=int, default=3000, help="bytes per span repeat")
    parser.add_argument("--random_every", type=int, default=0,
                        help="bytes per repeated random line (0 = none)")
    args = parser.parse_args()
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    excluded = held_out(repo_root)
    total, count = 0, 0
    for variant in range(args.variants):
        rng = random.Random(args.seed * 7919 + variant)
        folder = os.path.join(args.out, f"v{variant}")
        os.makedirs(folder, exist_ok=True)
        for doc_name, text in documents(args.root, excluded, rng):
            text = insert_all(text, rng, args.fact_every, args.span_every, args.random_every)
            with open(os.path.join(folder, doc_name + ".txt"), "w", encoding="utf-8") as f:
                f.write(text)
            total += len(text)
            count += 1
        print(f"variant {variant}: {count} documents, {total / 1e6:.1f} MB so far", file=sys.stderr)
    print(f"{count} documents, {total / 1e6:.1f} MB in {args.out}")


if __name__ == "__main__":
    main()
