#!/usr/bin/python3
"""Streams a generation from a mnemo server, then shows what the session remembers.

    /usr/bin/python3 clients/python/examples/stream.py [--address 127.0.0.1:50051] "Once upon"
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mnemo_client import Client, MnemoError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", nargs="?", default="The quick brown fox")
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--max_new_tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    with Client(args.address, timeout=60) as client:
        try:
            session = client.create_session()
            stream = client.generate(args.prompt, session_id=session.session_id,
                                     max_new_tokens=args.max_new_tokens,
                                     temperature=args.temperature, seed=args.seed)
            for chunk in stream:
                print(chunk.text, end="", flush=True)
            print()
            print(f"[finish_reason={stream.finish_reason} usage={stream.usage}]",
                  file=sys.stderr)
            info = client.get_session(session.session_id)
            print(f"[session {info.session_id}: tokens_seen={info.tokens_seen} "
                  f"memory_bytes={info.memory.bytes}]", file=sys.stderr)
            client.delete_session(session.session_id)
        except MnemoError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
