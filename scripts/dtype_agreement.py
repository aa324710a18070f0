#!/usr/bin/python3
"""Greedy outputs of two running mnemo servers compared: one with float16 attention memory
and/or float16 weights (mnemo-server --kv_dtype float16, --weight_dtype float16) against one
with the default float32.

For each prompt (the start of a held-out file of the model's split.json, as exit_agreement.py
takes them) both servers generate --max_new_tokens greedily at full depth; reported are the
fraction of output tokens equal at the same position, the mean common prefix, and how many
outputs are identical. Greedy outputs diverge for good once one token differs, so
position-wise agreement is a strict measure.

    build/server/mnemo-server --model models/mnemo-stdlib --listen 127.0.0.1:50051 &
    build/server/mnemo-server --model models/mnemo-stdlib --listen 127.0.0.1:50052 \\
        --metrics_listen "" --kv_dtype float16 --weight_dtype float16 &
    /usr/bin/python3 scripts/dtype_agreement.py --reference 127.0.0.1:50051 \\
        --address 127.0.0.1:50052
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))

from exit_agreement import agreement, prompts, run  # noqa: E402
from mnemo_client import Client  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", default="127.0.0.1:50051",
                        help="the server with float32 memory and weights")
    parser.add_argument("--address", default="127.0.0.1:50052",
                        help="the server with float16 memory and/or weights")
    parser.add_argument("--model", default="models/mnemo-stdlib")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt_chars", type=int, default=512)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    args = parser.parse_args()
    texts = prompts(args.model, args.prompts, args.prompt_chars)
    if not texts:
        print(f"no held-out file of {args.prompt_chars}+ characters in {args.model}/split.json",
              file=sys.stderr)
        return 1
    equal = total = prefix = identical = 0
    with Client(args.reference, timeout=600) as reference, Client(args.address,
                                                                  timeout=600) as other:
        for i, text in enumerate(texts):
            ref = run(reference, text, args.max_new_tokens, None)[0]
            ids = run(other, text, args.max_new_tokens, None)[0]
            same, common = agreement(ids, ref)
            equal += same
            total += len(ref)
            prefix += common
            identical += ids == ref
            print(f"\rprompt {i + 1}/{len(texts)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"{len(texts)} prompts x {args.max_new_tokens} greedy tokens")
    print("| tokens equal to the reference | mean common prefix | identical outputs |")
    print("|---:|---:|---:|")
    print(f"| {equal / total:.1%} | {prefix / len(texts):.1f} | {identical}/{len(texts)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
