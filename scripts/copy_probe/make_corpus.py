#!/usr/bin/env python3
"""Writes a pure copy corpus: files of lines `<s> <s>`, s = 8-24 random letters and digits.

    /usr/bin/python3 scripts/copy_probe/make_corpus.py OUT_DIR [--files 200] [--seed 1]

The first copy of each line is unpredictable (log2 62 = 5.95 bits per character); the second
is free to a model that copies in context. So bits per byte falls from ~5.8 to ~3 exactly when
a copying (induction) circuit forms: a probe of how fast a model and trainer learn to copy
(docs/results/training_speed.md). Train with `mnemo-train --corpus OUT_DIR --extensions .txt`.
"""
import argparse
import os
import random
import string

ALPHABET = string.ascii_letters + string.digits


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--bytes", type=int, default=32768, help="bytes per file (at least)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for f in range(args.files):
        lines, size = [], 0
        while size < args.bytes:
            s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(8, 24)))
            lines.append(f"{s} {s}\n")
            size += len(lines[-1])
        with open(os.path.join(args.out, f"doc{f:04d}.txt"), "w") as out:
            out.write("".join(lines))


if __name__ == "__main__":
    main()
