#!/usr/bin/python3
"""Recalls a document through a session's private kNN-LM datastore.

Adds DOCUMENT to a new session's private datastore (Datastores.AddToSessionDatastore), then
greedily continues the document's first words twice: with the model alone, and with
knn_lm {datastore: "session", lambda: 1, k: 1}, where every token is the one that followed the
nearest stored context, so the document comes back verbatim. Any mnemo server will do (no
--datastore needed); with shared datastores loaded it lists them too.

    /usr/bin/python3 clients/python/examples/recall.py [--address 127.0.0.1:50051] \\
        ["Some document to remember."] [--prefix_chars 16]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mnemo_client import Client, KnnLm, MnemoError  # noqa: E402

DOCUMENT = "Meeting notes: the launch moves to Tuesday, Priya owns the checklist."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("document", nargs="?", default=DOCUMENT)
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--prefix_chars", type=int, default=16,
                        help="characters of the document given as the prompt")
    args = parser.parse_args()
    prefix = args.document[:args.prefix_chars]
    rest_bytes = len(args.document.encode()) - len(prefix.encode())

    with Client(args.address, timeout=60) as client:
        try:
            for d in client.list_datastores():
                print(f"[shared datastore {d.name}: {d.entries} entries, {d.index_type}, "
                      f"defaults lambda={d.default_lambda:g} k={d.default_k} "
                      f"temperature={d.default_temperature:g}]", file=sys.stderr)
            plain_sid = client.create_session().session_id
            knn_sid = client.create_session().session_id
            added = client.add_to_session_datastore(knn_sid, args.document)
            print(f"[added {added.entries_added} entries; the session's datastore holds "
                  f"{added.datastore.entries} ({added.datastore.bytes} bytes)]", file=sys.stderr)

            # Byte-level models: one token per byte, so rest_bytes tokens finish the document.
            plain = client.generate(prefix, session_id=plain_sid, max_new_tokens=rest_bytes,
                                    temperature=0, stop_at_eos=False).text()
            recalled = client.generate(prefix, session_id=knn_sid, max_new_tokens=rest_bytes,
                                       temperature=0, stop_at_eos=False,
                                       knn_lm=KnnLm("session", lambda_=1.0, k=1)).text()
            print(f"prompt      : {prefix!r}")
            print(f"model alone : {plain!r}")
            print(f"with kNN-LM : {recalled!r}")
            print("recalled verbatim" if prefix + recalled == args.document else "not verbatim")
            for sid in (plain_sid, knn_sid):
                client.delete_session(sid)
        except MnemoError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
