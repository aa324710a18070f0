#!/usr/bin/python3
"""Passkey retrieval through a running mnemo server, kNN memory on vs off.

Each trial: `PASSKEY = "<5 digits>"`, then at least DISTANCE bytes of held-out code (the model's
split.json validation files, concatenated from a seeded start), then `PASSKEY = "`. The document
is the prompt of one greedy Generate on a fresh session; the trial passes when the 5 generated
bytes are the digits. "kNN on" gives the session a kNN memory large enough to still hold the
header (the next power of two above the distance); "off" gives it the smallest the server
allows for this purpose (1,024 entries: only the most recent positions). Same layout as
mnemo-eval --passkey (engine/eval/passkey.h), but through the API a client uses.

    /usr/bin/python3 scripts/passkey_server.py --address 127.0.0.1:50051 \\
        --model models/mnemo-stdlib --distances 32768,131072 --trials 3
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

from mnemo_client import Client  # noqa: E402

PROMPT = 'PASSKEY = "'


def held_out_text(model_dir: str) -> list:
    split = json.load(open(os.path.join(model_dir, "split.json")))
    root = split["root"]
    texts = []
    for rel in sorted(split["validation"]):
        path = rel if os.path.isabs(rel) else os.path.join(root, rel)
        try:
            texts.append(open(path, encoding="utf-8").read())
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def document(texts: list, distance: int, seed: int) -> tuple:
    rng = random.Random(seed)
    digits = "".join(rng.choice("0123456789") for _ in range(5))
    order = texts[:]
    rng.shuffle(order)
    filler = ""
    while len(filler.encode()) < distance:
        for t in order:
            filler += t if t.endswith("\n") else t + "\n"
            if len(filler.encode()) >= distance:
                break
    return PROMPT + digits + '"\n' + filler + PROMPT, digits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--model", default="models/mnemo-stdlib")
    parser.add_argument("--distances", default="32768,131072")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    texts = held_out_text(args.model)
    results = []
    with Client(args.address, timeout=3600) as client:
        for distance in [int(d) for d in args.distances.split(",")]:
            on_capacity = 1 << (distance + 64).bit_length()
            for label, capacity in (("on", on_capacity), ("off", 1024)):
                passed = 0
                for seed in range(args.trials):
                    text, digits = document(texts, distance, seed)
                    session = client.create_session(knn_capacity=capacity).session_id
                    start = time.time()
                    out = client.generate(text, session_id=session, max_new_tokens=5,
                                          temperature=0, stop_at_eos=False).text()
                    elapsed = time.time() - start
                    client.delete_session(session)
                    ok = out == digits
                    passed += ok
                    print(f"distance {distance} kNN {label} (capacity {capacity}) seed {seed}: "
                          f"want {digits} got {out!r} {'PASS' if ok else 'fail'} "
                          f"({len(text.encode())} bytes, {elapsed:.1f} s)", flush=True)
                    results.append({"distance": distance, "knn": label, "capacity": capacity,
                                    "seed": seed, "digits": digits, "output": out,
                                    "passed": ok, "bytes": len(text.encode()),
                                    "seconds": elapsed})
                print(f"== distance {distance} kNN {label}: {passed}/{args.trials}", flush=True)
    if args.json:
        json.dump(results, open(args.json, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
