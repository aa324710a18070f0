"""The values mnemo_client returns, and how they are read from the mnemo.v1 messages.

Plain dataclasses (one per message a caller sees) and the `*_from_proto` functions that
`Client` uses to build them. Nothing here talks to the network.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from mnemo_client._stubs import datastores_pb2, generation_pb2, models_pb2, sessions_pb2

FINISH_PREFIX = "FINISH_REASON_"


@dataclasses.dataclass
class TokenAlternative:
    id: int
    text: str
    logprob: float


@dataclasses.dataclass
class TokenInfo:
    id: int
    text: str  # UTF-8 text this token completes ("" for a leading byte of a character)
    bytes: bytes
    logprob: float
    exit_layer: int
    top_logprobs: List[TokenAlternative]


@dataclasses.dataclass
class Usage:
    prompt_tokens: int
    generated_tokens: int
    session_tokens: int


@dataclasses.dataclass
class Chunk:
    """One streamed delta. The last chunk has finish_reason and usage set."""

    text: str
    tokens: List[TokenInfo]
    finish_reason: Optional[str]  # "LENGTH", "STOP", "EOS", "CANCELLED", "ERROR" or None
    usage: Optional[Usage]


@dataclasses.dataclass
class ScoreResult:
    token_count: int  # tokens scored (a fresh sequence's unprimed first token is context only)
    byte_count: int  # UTF-8 bytes the scored tokens stand for
    total_logprob: float  # natural log
    bits_per_byte: float  # 0 when byte_count is 0
    logprobs: List[float]  # per scored token, when requested


@dataclasses.dataclass
class SessionMemory:
    xl_tokens: int
    compressed_slots: int
    knn_entries: int
    bytes: int
    remembered_tokens: int = 0  # recall history (sessions created with remember)


@dataclasses.dataclass
class Session:
    session_id: str
    model: str
    tokens_seen: int
    memory: SessionMemory
    create_time: int  # seconds since the Unix epoch
    last_use_time: int
    busy: bool
    ttl_seconds: int = 0  # its own idle TTL; 0 = the server's
    pinned: bool = False


@dataclasses.dataclass
class ModelInfo:
    name: str
    path: str
    layers: int
    d_model: int
    heads: int
    vocab_size: int
    parameters: int
    seg_len: int
    mem_len: int
    cmem_len: int
    cmem_rate: int
    compression: str
    clamp_len: int
    tokenizer: str  # the tokenizer's kind: "byte", ...
    dtype: str  # of the weights on disk
    device: str
    family: str  # the architecture: "mnemo-xl", "LlamaForCausalLM", ...
    weight_dtype: str  # as loaded for serving: "float32", "float16", "bfloat16"
    window: int  # raw positions of context a token attends to
    sink_tokens: int  # leading positions kept visible beyond the window


@dataclasses.dataclass
class Datastore:
    """A kNN-LM datastore as the server reports it (datastores.proto `Datastore`)."""

    name: str  # "session" for a session's private datastore
    session_id: str  # set for a session's private datastore
    dir: str  # shared datastores: the directory it was loaded from
    model: str  # "name@fingerprint" of the model whose hidden states are the keys
    key_type: str
    dimension: int
    entries: int
    bytes: int  # files on disk (shared) or RAM (a session's)
    index_type: str  # "flat" or "ivfpq" (shared), "exact" (a session's)
    nlist: int
    pq_m: int
    pq_nbits: int
    corpus: str
    corpus_files: int
    corpus_bytes: int
    build_seconds: float
    built_at: str  # UTC, ISO 8601
    default_lambda: float  # what a request gets for each knn_lm field it leaves unset
    default_k: int
    default_temperature: float


@dataclasses.dataclass
class AddToDatastoreResult:
    entries_added: int
    datastore: Datastore  # the session's datastore after the addition


def datastore_from_proto(msg: datastores_pb2.Datastore) -> Datastore:
    return Datastore(
        name=msg.name, session_id=msg.session_id, dir=msg.dir, model=msg.model,
        key_type=msg.key_type, dimension=msg.dimension, entries=msg.entries, bytes=msg.bytes,
        index_type=msg.index_type, nlist=msg.nlist, pq_m=msg.pq_m, pq_nbits=msg.pq_nbits,
        corpus=msg.corpus, corpus_files=msg.corpus_files, corpus_bytes=msg.corpus_bytes,
        build_seconds=msg.build_seconds, built_at=msg.built_at,
        default_lambda=msg.default_lambda, default_k=msg.default_k,
        default_temperature=msg.default_temperature)


def finish_name(value: int) -> Optional[str]:
    if value == generation_pb2.FINISH_REASON_UNSPECIFIED:
        return None
    name = generation_pb2.FinishReason.Name(value)
    return name[len(FINISH_PREFIX):] if name.startswith(FINISH_PREFIX) else name


def chunk_from_proto(msg: generation_pb2.GenerateResponse) -> Chunk:
    tokens = [
        TokenInfo(
            id=t.id,
            text=t.text,
            bytes=t.bytes,
            logprob=t.logprob,
            exit_layer=t.exit_layer,
            top_logprobs=[TokenAlternative(a.id, a.text, a.logprob) for a in t.top_logprobs],
        )
        for t in msg.tokens
    ]
    usage = None
    if msg.HasField("usage"):
        usage = Usage(msg.usage.prompt_tokens, msg.usage.generated_tokens,
                      msg.usage.session_tokens)
    return Chunk(msg.text, tokens, finish_name(msg.finish_reason), usage)


def session_from_proto(msg: sessions_pb2.Session) -> Session:
    m = msg.memory
    return Session(
        session_id=msg.session_id,
        model=msg.model,
        tokens_seen=msg.tokens_seen,
        memory=SessionMemory(m.xl_tokens, m.compressed_slots, m.knn_entries, m.bytes,
                             m.remembered_tokens),
        create_time=msg.create_time,
        last_use_time=msg.last_use_time,
        busy=msg.busy,
        ttl_seconds=msg.ttl_seconds,
        pinned=msg.pinned,
    )


def model_from_proto(msg: models_pb2.Model) -> ModelInfo:
    mem = msg.memory
    return ModelInfo(
        name=msg.name, path=msg.path, layers=msg.layers, d_model=msg.d_model, heads=msg.heads,
        vocab_size=msg.vocab_size, parameters=msg.parameters, seg_len=mem.seg_len,
        mem_len=mem.mem_len, cmem_len=mem.cmem_len, cmem_rate=mem.cmem_rate,
        compression=mem.compression, clamp_len=mem.clamp_len, tokenizer=msg.tokenizer,
        dtype=msg.dtype, device=msg.device, family=msg.family, weight_dtype=msg.weight_dtype,
        window=msg.window, sink_tokens=msg.sink_tokens)
