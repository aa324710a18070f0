#!/usr/bin/python3
"""Early exit vs full depth through a running mnemo server: greedy outputs compared.

For each prompt (the start of a held-out file of the model's split.json), generates
--max_new_tokens greedily at full depth and with early_exit at each threshold, and reports the
mean exit layer, the fraction of output tokens equal to the full-depth output at the same
position, and the mean length of the common prefix. Greedy outputs diverge for good once one
token differs, so position-wise agreement is a strict measure. --measure picks the confidence
(softmax, saturation or classifier; default: the model's); a threshold "calibrated" sends none,
so the server uses the model's calibrated threshold for that measure.

    /usr/bin/python3 scripts/exit_agreement.py --address 127.0.0.1:50051 --thresholds 0.9,0.5,0.3
    /usr/bin/python3 scripts/exit_agreement.py --measure classifier --thresholds calibrated,0.8
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

from mnemo_client import Client  # noqa: E402


def prompts(model_dir: str, count: int, chars: int) -> list:
    split = json.load(open(os.path.join(model_dir, "split.json")))
    out = []
    for rel in sorted(split["validation"]):
        path = rel if os.path.isabs(rel) else os.path.join(split["root"], rel)
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= chars:
            out.append(text[:chars])
        if len(out) == count:
            break
    return out


CALIBRATED = "calibrated"


def agreement(ids, ref):
    """(tokens of `ids` equal to `ref` at the same position, length of their common prefix)."""
    equal = sum(a == b for a, b in zip(ids, ref))
    k = 0
    while k < min(len(ids), len(ref)) and ids[k] == ref[k]:
        k += 1
    return equal, k


def run(client, prompt, n, threshold, measure=None):
    """threshold None = full depth; CALIBRATED = early exit at the model's threshold."""
    kwargs = {}
    if threshold is not None:
        kwargs["early_exit"] = True
        if threshold != CALIBRATED:
            kwargs["exit_threshold"] = threshold
        if measure:
            kwargs["exit_measure"] = measure
    stream = client.generate(prompt, max_new_tokens=n, temperature=0, stop_at_eos=False, **kwargs)
    ids, layers = [], []
    for chunk in stream:
        for t in chunk.tokens:
            ids.append(t.id)
            layers.append(t.exit_layer)
    return ids, layers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--model", default="models/mnemo-stdlib")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt_chars", type=int, default=512)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--thresholds", default="0.9,0.5,0.3",
                        help=f"comma list of thresholds in (0, 1] or '{CALIBRATED}'")
    parser.add_argument("--measure", default="",
                        choices=["", "softmax", "saturation", "classifier"],
                        help="exit measure (default: the model's)")
    args = parser.parse_args()
    thresholds = [t if t == CALIBRATED else float(t) for t in args.thresholds.split(",")]
    texts = prompts(args.model, args.prompts, args.prompt_chars)
    with Client(args.address, timeout=600) as client:
        full = [run(client, p, args.max_new_tokens, None)[0] for p in texts]
        print(f"{len(texts)} prompts x {args.max_new_tokens} greedy tokens, "
              f"measure {args.measure or 'the model default'}")
        print("| threshold | mean exit layer | tokens equal to full depth | mean common prefix |")
        print("|---|---:|---:|---:|")
        for threshold in thresholds:
            equal = total = prefix = 0
            layer_sum = layer_count = 0
            for p, ref in zip(texts, full):
                ids, layers = run(client, p, args.max_new_tokens, threshold, args.measure)
                same, common = agreement(ids, ref)
                equal += same
                total += len(ref)
                prefix += common
                layer_sum += sum(layers)
                layer_count += len(layers)
            print(f"| {threshold} | {layer_sum / layer_count:.2f} | {equal / total:.1%} | "
                  f"{prefix / len(texts):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
