#!/usr/bin/python3
"""Recall through a running mnemo server (docs/recall.md, docs/results/recall.md).

Passkey: a code stated once, then at least D bytes of filler, then the question; one greedy
Generate on a fresh session must answer with the code. Each trial draws its phrasing (from
PHRASINGS), its filler source (the model's held-out files, or plain-English licence texts the
model never saw) and its code (digits or letters and digits) from the trial's seed, so no one
format is measured. "on": the session is created with remember (recall on by default); "off":
the same session without it.

Facts: ten different key = value facts spread over D bytes of filler, fed to a remembering
session, then each asked once (a Generate on the same session).

    /usr/bin/python3 scripts/recall_server.py --address 127.0.0.1:50051 \\
        --model models/mnemo-stdlib --distances 8192,32768,131072,1048576 \\
        --trials 20,20,20,5 --off_trials 5,5,5,1 --facts 131072 --bpb_files 8 \\
        --out docs/results/recall
"""

import argparse
import glob
import json
import math
import os
import random
import string
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

from mnemo_client import Client  # noqa: E402

# (statement, question) with {code}; the answer follows the question.
PHRASINGS = [
    ('PASSKEY = "{code}"\n', 'PASSKEY = "'),
    ("The pass key is {code}. Remember it. {code} is the pass key.\n",
     "What is the pass key? The pass key is "),
    ("# secret code: {code}\n", "# What was the secret code?\n# secret code: "),
    ("access_token = '{code}'\n", "assert check(access_token)\naccess_token = '"),
    ("Note to self: the locker combination is {code}.\n",
     "Question: which combination opens the locker?\nAnswer: the locker combination is "),
]

FACT_KEYS = ["colour of the door", "name of the ship", "port of the database", "city of birth",
             "favourite number", "password of the vault", "height of the tower",
             "owner of the dog", "year of the treaty", "code of the alarm", "size of the batch",
             "author of the memo"]


def held_out(model_dir):
    split = json.load(open(os.path.join(model_dir, "split.json")))
    texts = []
    for path in sorted(split["validation"]):
        path = path if os.path.isabs(path) else os.path.join(split["root"], path)
        try:
            texts.append(open(path, encoding="utf-8").read())
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def prose():
    texts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            texts.append(open(path, encoding="utf-8").read())
        except (OSError, UnicodeDecodeError, IsADirectoryError):
            continue
    return texts


def filler(sources, distance, rng):
    """At least `distance` bytes of whole lines from a seeded order of `sources` (wrapping)."""
    order = sources[:]
    rng.shuffle(order)
    first = order[0]
    start = first.find("\n", rng.randrange(len(first))) + 1
    parts, size, k = [first[start:]], len(first) - start, 1
    while size < distance:
        text = order[k % len(order)]
        parts.append(text if text.endswith("\n") else text + "\n")
        size += len(parts[-1])
        k += 1
    out = "".join(parts)
    cut = out.find("\n", distance - 1)
    return out[:cut + 1] if cut >= 0 else out


def code(rng):
    if rng.random() < 0.6:
        return "".join(rng.choice(string.digits) for _ in range(5))
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(rng.randint(5, 8)))


def passkey_trial(client, sources, distance, seed, remember, knn_capacity, measure_itl=False):
    rng = random.Random(seed)
    statement, question = PHRASINGS[rng.randrange(len(PHRASINGS))]
    source_name = rng.choice(sorted(sources))
    answer = code(rng)
    text = statement.format(code=answer) + filler(sources[source_name], distance, rng) + question
    # Room for the whole text (the default capacity, 1 M tokens, would forget the statement of
    # a 1 MB trial by a few hundred tokens).
    capacity = 1 << 20
    while capacity < len(text.encode()) + 1024:
        capacity *= 2
    session = client.create_session(remember=remember, knn_capacity=knn_capacity,
                                    remember_capacity=capacity if remember else 0)
    start = time.time()
    out = "".join(c.text for c in client.generate(text, session_id=session.session_id,
                                                   max_new_tokens=len(answer) + 2,
                                                   temperature=0))
    seconds = time.time() - start
    info = client.get_session(session.session_id)
    itl_ms = None
    if measure_itl:  # per-token decode time with this much history: 32 more greedy tokens
        stamps = [time.time()]
        for _ in client.generate("", session_id=session.session_id, max_new_tokens=33,
                                 temperature=0):
            stamps.append(time.time())
        itl_ms = round((stamps[-1] - stamps[1]) / max(1, len(stamps) - 2) * 1000, 3)
    client.delete_session(session.session_id)
    return {"seed": seed, "phrasing": PHRASINGS.index((statement, question)), "filler": source_name,
            "code": answer, "output": out, "passed": out.startswith(answer),
            "bytes": len(text.encode()), "seconds": round(seconds, 2),
            "session_bytes": info.memory.bytes, "remembered_tokens": info.memory.remembered_tokens,
            "itl_ms": itl_ms}


def facts_trial(client, sources, distance, seed, knn_capacity):
    rng = random.Random(seed)
    keys = rng.sample(FACT_KEYS, 10)
    values = {k: code(rng) for k in keys}
    body = filler(sources[rng.choice(sorted(sources))], distance, rng)
    lines = body.split("\n")
    # Facts at evenly spread line starts, in a shuffled order.
    spots = sorted(rng.sample(range(len(lines)), 10))
    for spot, key in zip(reversed(spots), keys):
        lines.insert(spot, f"The {key} is {values[key]}.")
    session = client.create_session(remember=True, knn_capacity=knn_capacity)
    client.score("\n".join(lines) + "\n", session_id=session.session_id, update_memory=True)
    asked = []
    for key in rng.sample(keys, len(keys)):
        out = "".join(c.text for c in client.generate(
            f"Question: what is the {key}?\nThe {key} is ", session_id=session.session_id,
            max_new_tokens=len(values[key]) + 1, temperature=0))
        asked.append({"key": key, "value": values[key], "output": out,
                      "passed": out.startswith(values[key])})
    client.delete_session(session.session_id)
    return asked


def bits_per_byte(client, model_dir, files, max_bytes):
    """One-shot Score of the first `max_bytes` of each text of at least that size, recall off
    and on: the held-out files (mnemo-eval's evaluation files), and the licence texts (prose)."""
    split = json.load(open(os.path.join(model_dir, "split.json")))
    code = sorted(p if os.path.isabs(p) else os.path.join(split["root"], p)
                  for p in split["validation"])
    code = [p for p in code if os.path.getsize(p) >= max_bytes][:files]
    # The largest licence texts (links resolved, each once), up to max_bytes of each.
    licences = {os.path.realpath(p) for p in glob.glob("/usr/share/common-licenses/*")}
    prose_paths = sorted((p for p in licences if os.path.isfile(p)), key=os.path.getsize,
                         reverse=True)[:files]
    out = {}
    for name, paths in (("held-out code", code), ("licence prose", prose_paths)):
        out[name] = {"files": paths}
        for recall in (False, True):
            total, size = 0.0, 0
            for path in paths:
                text = open(path, encoding="utf-8").read()[:max_bytes]
                r = client.score(text, recall=recall)
                total += r.total_logprob
                size += r.byte_count
            key = "on" if recall else "off"
            out[name][key] = -total / math.log(2) / size
            out[name]["bytes"] = size
            print(f"bits per byte, {name}, recall {key}: {out[name][key]:.4f} "
                  f"({size} bytes, {len(paths)} files)", flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--model", default="models/mnemo-stdlib",
                        help="model directory (its split.json names the held-out filler)")
    parser.add_argument("--distances", default="8192,32768,131072")
    parser.add_argument("--trials", default="20", help="one count, or one per distance")
    parser.add_argument("--off_trials", default="5", help="trials off: one count, or one per distance")
    parser.add_argument("--facts", type=int, default=131072, help="facts filler bytes (0 = skip)")
    parser.add_argument("--facts_trials", type=int, default=2)
    parser.add_argument("--knn_capacity", type=int, default=1024,
                        help="the sessions' kNN memory (recall does not use it)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--itl_trials", type=int, default=0,
                        help="trials per cell that also time 32 more tokens (decode latency)")
    parser.add_argument("--out", default="", help="directory for recall.json")
    parser.add_argument("--bpb_files", type=int, default=0,
                        help="also score this many held-out files (first --bpb_bytes each), "
                             "recall off and on")
    parser.add_argument("--bpb_bytes", type=int, default=32768)
    args = parser.parse_args()
    client = Client(args.address, timeout=7200)
    sources = {"held-out code": held_out(args.model), "licence prose": prose()}
    distances = [int(d) for d in args.distances.split(",")]
    trials = [int(t) for t in args.trials.split(",")]
    trials = trials * len(distances) if len(trials) == 1 else trials
    off = [int(t) for t in args.off_trials.split(",")]
    off = off * len(distances) if len(off) == 1 else off
    report = {"model": args.model, "passkey": [], "facts": []}
    for distance, count, off_count in zip(distances, trials, off):
        for remember, n in ((True, count), (False, off_count)):
            rows = []
            for i in range(n):
                rows.append(passkey_trial(client, sources, distance, args.seed + i, remember,
                                          args.knn_capacity, measure_itl=i < args.itl_trials))
                print(f"D={distance} recall={'on' if remember else 'off'} #{i}: "
                      f"{rows[-1]['code']!r} -> {rows[-1]['output']!r} "
                      f"({rows[-1]['seconds']} s)", file=sys.stderr, flush=True)
            passed = sum(r["passed"] for r in rows)
            report["passkey"].append({"distance": distance, "recall": remember, "passed": passed,
                                      "trials": n, "rows": rows})
            print(f"passkey D={distance} recall={'on' if remember else 'off'}: {passed}/{n}",
                  flush=True)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                json.dump(report, open(os.path.join(args.out, "recall.json"), "w"), indent=1)
    if args.bpb_files:
        report["bits_per_byte"] = bits_per_byte(client, args.model, args.bpb_files, args.bpb_bytes)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            json.dump(report, open(os.path.join(args.out, "recall.json"), "w"), indent=1)
    for t in range(args.facts_trials if args.facts else 0):
        asked = facts_trial(client, sources, args.facts, args.seed + 500 + t, args.knn_capacity)
        report["facts"].append({"distance": args.facts, "asked": asked,
                                "passed": sum(a["passed"] for a in asked)})
        print(f"facts over {args.facts} bytes: {report['facts'][-1]['passed']}/10", flush=True)
        if args.out:
            json.dump(report, open(os.path.join(args.out, "recall.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
