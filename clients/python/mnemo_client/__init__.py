"""Python client for a mnemo server.

    from mnemo_client import Client, KnnLm
    with Client("127.0.0.1:50051") as client:
        for chunk in client.generate("Once upon a time", max_new_tokens=32, seed=1):
            print(chunk.text, end="", flush=True)
        # kNN-LM with a datastore loaded by `mnemo-server --datastore NAME=DIR`:
        print(client.score("import os", knn_lm=KnnLm("stdlib", lambda_=0.25)).bits_per_byte)
"""

from mnemo_client.client import (  # noqa: F401
    AddToDatastoreResult,
    Chunk,
    Client,
    Datastore,
    GenerateStream,
    KnnLm,
    MnemoError,
    ModelInfo,
    Recall,
    ScoreResult,
    Session,
    SessionMemory,
    TokenAlternative,
    TokenInfo,
    Usage,
)

__all__ = [
    "AddToDatastoreResult",
    "Chunk",
    "Client",
    "Datastore",
    "GenerateStream",
    "KnnLm",
    "MnemoError",
    "ModelInfo",
    "Recall",
    "ScoreResult",
    "Session",
    "SessionMemory",
    "TokenAlternative",
    "TokenInfo",
    "Usage",
]
