"""Python client for a mnemo server.

    from mnemo_client import Client
    with Client("127.0.0.1:50051") as client:
        for chunk in client.generate("Once upon a time", max_new_tokens=32, seed=1):
            print(chunk.text, end="", flush=True)
"""

from mnemo_client.client import (  # noqa: F401
    Chunk,
    Client,
    GenerateStream,
    MnemoError,
    ModelInfo,
    ScoreResult,
    Session,
    SessionMemory,
    TokenAlternative,
    TokenInfo,
    Usage,
)

__all__ = [
    "Chunk",
    "Client",
    "GenerateStream",
    "MnemoError",
    "ModelInfo",
    "ScoreResult",
    "Session",
    "SessionMemory",
    "TokenAlternative",
    "TokenInfo",
    "Usage",
]
