"""A small typed wrapper over the mnemo.v1 gRPC stubs.

`Client` owns one insecure channel. Every call takes the client's default timeout (seconds)
unless given its own. Errors surface as `MnemoError` carrying the gRPC status code and the
server's message; streaming generation is an iterator of `Chunk`s that can be cancelled.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Union

import grpc

from mnemo_client._stubs import (
    datastores_pb2,
    datastores_pb2_grpc,
    generation_pb2,
    generation_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    models_pb2,
    models_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
)

_FINISH_PREFIX = "FINISH_REASON_"


class MnemoError(Exception):
    """A non-OK gRPC status from the server (or the channel)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "MnemoError":
        return cls(error.code(), error.details() or "")


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
    token_count: int
    byte_count: int
    total_logprob: float  # natural log
    bits_per_byte: float
    logprobs: List[float]  # per token, when requested


@dataclasses.dataclass
class SessionMemory:
    xl_tokens: int
    compressed_slots: int
    knn_entries: int
    bytes: int


@dataclasses.dataclass
class Session:
    session_id: str
    model: str
    tokens_seen: int
    memory: SessionMemory
    create_time: int  # seconds since the Unix epoch
    last_use_time: int
    busy: bool


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
    tokenizer: str
    dtype: str
    device: str


@dataclasses.dataclass
class KnnLm:
    """kNN-LM interpolation for one Generate or Score call (generation.proto `KnnLm`).

    datastore: a shared datastore's name (see `Client.list_datastores`) or "session" for the
      session's private one (`Client.add_to_session_datastore`; the call then needs a
      session_id). Fields left as None / 0 take the datastore's defaults (`Datastore.default_*`).
    lambda_: weight of p_kNN in [0, 1] (`lambda` on the wire; a Python keyword).
    k: neighbours per token, 0 = default, at most 1024.
    temperature: > 0, in squared-L2 units of the keys.
    """

    datastore: str
    lambda_: Optional[float] = None
    k: int = 0
    temperature: Optional[float] = None


KnnLmLike = Union[KnnLm, Mapping[str, Any]]


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


def _knn_lm_from(value: Optional[KnnLmLike]) -> Optional[KnnLm]:
    """Accepts a KnnLm or a dict with the keys datastore, lambda_ (or lambda), k, temperature."""
    if value is None or isinstance(value, KnnLm):
        return value
    fields = dict(value)
    if "lambda" in fields:
        if "lambda_" in fields:
            raise ValueError("knn_lm: give lambda or lambda_, not both")
        fields["lambda_"] = fields.pop("lambda")
    unknown = set(fields) - {"datastore", "lambda_", "k", "temperature"}
    if unknown:
        raise ValueError(f"knn_lm: unknown keys {sorted(unknown)} "
                         "(expected datastore, lambda_, k, temperature)")
    return KnnLm(**fields)


def _fill_knn_lm(value: Optional[KnnLmLike], out: generation_pb2.KnnLm) -> None:
    knn = _knn_lm_from(value)
    if knn is None:
        return
    out.datastore = knn.datastore
    if knn.lambda_ is not None:
        setattr(out, "lambda", knn.lambda_)  # `lambda` is a Python keyword
    out.k = knn.k
    if knn.temperature is not None:
        out.temperature = knn.temperature


# Names of the CALM exit measures, as mnemo-calibrate --measure and config.json spell them.
EXIT_MEASURES = ("softmax", "saturation", "classifier")


def _exit_measure(name: str) -> int:
    values = {
        "softmax": generation_pb2.EXIT_MEASURE_SOFTMAX_RESPONSE,
        "saturation": generation_pb2.EXIT_MEASURE_HIDDEN_SATURATION,
        "classifier": generation_pb2.EXIT_MEASURE_CLASSIFIER,
    }
    if name not in values:
        raise ValueError(f"exit_measure must be one of {', '.join(EXIT_MEASURES)}, got {name!r}")
    return values[name]


def _datastore_from_proto(msg: datastores_pb2.Datastore) -> Datastore:
    return Datastore(
        name=msg.name, session_id=msg.session_id, dir=msg.dir, model=msg.model,
        key_type=msg.key_type, dimension=msg.dimension, entries=msg.entries, bytes=msg.bytes,
        index_type=msg.index_type, nlist=msg.nlist, pq_m=msg.pq_m, pq_nbits=msg.pq_nbits,
        corpus=msg.corpus, corpus_files=msg.corpus_files, corpus_bytes=msg.corpus_bytes,
        build_seconds=msg.build_seconds, built_at=msg.built_at,
        default_lambda=msg.default_lambda, default_k=msg.default_k,
        default_temperature=msg.default_temperature)


def _finish_name(value: int) -> Optional[str]:
    if value == generation_pb2.FINISH_REASON_UNSPECIFIED:
        return None
    name = generation_pb2.FinishReason.Name(value)
    return name[len(_FINISH_PREFIX):] if name.startswith(_FINISH_PREFIX) else name


def _chunk_from_proto(msg: generation_pb2.GenerateResponse) -> Chunk:
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
    return Chunk(msg.text, tokens, _finish_name(msg.finish_reason), usage)


def _session_from_proto(msg: sessions_pb2.Session) -> Session:
    m = msg.memory
    return Session(
        session_id=msg.session_id,
        model=msg.model,
        tokens_seen=msg.tokens_seen,
        memory=SessionMemory(m.xl_tokens, m.compressed_slots, m.knn_entries, m.bytes),
        create_time=msg.create_time,
        last_use_time=msg.last_use_time,
        busy=msg.busy,
    )


def _model_from_proto(msg: models_pb2.Model) -> ModelInfo:
    mem = msg.memory
    return ModelInfo(
        name=msg.name, path=msg.path, layers=msg.layers, d_model=msg.d_model, heads=msg.heads,
        vocab_size=msg.vocab_size, parameters=msg.parameters, seg_len=mem.seg_len,
        mem_len=mem.mem_len, cmem_len=mem.cmem_len, cmem_rate=mem.cmem_rate,
        compression=mem.compression, clamp_len=mem.clamp_len, tokenizer=msg.tokenizer,
        dtype=msg.dtype, device=msg.device)


class GenerateStream:
    """Iterator over the chunks of one Generate call.

    After iteration ends, `finish_reason` and `usage` hold the last chunk's values. `cancel()`
    stops the stream (from any thread); iteration then ends quietly.
    """

    def __init__(self, call):
        self._call = call
        self._cancelled = False
        self.finish_reason: Optional[str] = None
        self.usage: Optional[Usage] = None

    def __iter__(self) -> Iterator[Chunk]:
        return self

    def __next__(self) -> Chunk:
        try:
            msg = next(self._call)
        except StopIteration:
            raise
        except grpc.RpcError as error:
            if self._cancelled and error.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise MnemoError.from_rpc_error(error) from None
        chunk = _chunk_from_proto(msg)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage
        return chunk

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    def text(self) -> str:
        """Consumes the rest of the stream and returns its text."""
        return "".join(chunk.text for chunk in self)


class Client:
    """Connection to one mnemo server.

    Args:
      address: gRPC target, e.g. "127.0.0.1:50051".
      timeout: default deadline of every call in seconds (for generate: the whole stream);
        None = no deadline.
    """

    def __init__(self, address: str = "127.0.0.1:50051", timeout: Optional[float] = 60.0):
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address)
        self._generation = generation_pb2_grpc.GenerationStub(self._channel)
        self._sessions = sessions_pb2_grpc.SessionsStub(self._channel)
        self._models = models_pb2_grpc.ModelsStub(self._channel)
        self._datastores = datastores_pb2_grpc.DatastoresStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _unary(self, method, request, timeout):
        try:
            return method(request, timeout=self._timeout(timeout))
        except grpc.RpcError as error:
            raise MnemoError.from_rpc_error(error) from None

    # --- Generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompt: str = "",
        *,
        session_id: str = "",
        max_new_tokens: int = 0,
        temperature: Optional[float] = None,
        top_k: int = 0,
        top_p: Optional[float] = None,
        seed: Optional[int] = None,
        repetition_penalty: Optional[float] = None,
        stop: Iterable[str] = (),
        logprobs: int = 0,
        stop_at_eos: Optional[bool] = None,
        knn_lm: Optional[KnnLmLike] = None,
        early_exit: bool = False,
        exit_threshold: Optional[float] = None,
        exit_measure: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> GenerateStream:
        """Starts a streaming generation; iterate the result for `Chunk`s.

        Unset sampling fields take the server's defaults (temperature 1.0, top_p 1.0, a random
        seed, repetition_penalty 1.0); temperature=0 is greedy. `knn_lm` (a `KnnLm` or a dict
        with datastore, lambda_, k, temperature) mixes a datastore's neighbours into every
        generated token's distribution; request errors surface when the stream is read.
        `early_exit` turns on CALM early exit (each token reports its `exit_layer`);
        `exit_measure` picks the confidence it exits on ("softmax", "saturation" or
        "classifier"; None = the model's default) and `exit_threshold` in (0, 1] overrides the
        model's calibrated threshold for that measure. Raises ValueError for an unknown
        measure name.
        """
        request = generation_pb2.GenerateRequest(
            session_id=session_id, prompt=prompt, max_new_tokens=max_new_tokens,
            stop=list(stop), logprobs=logprobs)
        sampling = request.sampling
        sampling.top_k = top_k
        if temperature is not None:
            sampling.temperature = temperature
        if top_p is not None:
            sampling.top_p = top_p
        if seed is not None:
            sampling.seed = seed
        if repetition_penalty is not None:
            sampling.repetition_penalty = repetition_penalty
        if stop_at_eos is not None:
            request.stop_at_eos = stop_at_eos
        _fill_knn_lm(knn_lm, request.knn_lm)
        request.early_exit.enabled = early_exit
        if exit_threshold is not None:
            request.early_exit.threshold = exit_threshold
        if exit_measure is not None:
            request.early_exit.measure = _exit_measure(exit_measure)
        call = self._generation.Generate(request, timeout=self._timeout(timeout))
        return GenerateStream(call)

    def score(self, text: str, *, session_id: str = "", update_memory: bool = False,
              token_logprobs: bool = False, knn_lm: Optional[KnnLmLike] = None,
              timeout: Optional[float] = None) -> ScoreResult:
        """Log-likelihood of `text`; with `knn_lm`, under the kNN-LM mixture (as in generate)."""
        request = generation_pb2.ScoreRequest(session_id=session_id, text=text,
                                              update_memory=update_memory,
                                              token_logprobs=token_logprobs)
        _fill_knn_lm(knn_lm, request.knn_lm)
        r = self._unary(self._generation.Score, request, timeout)
        return ScoreResult(r.token_count, r.byte_count, r.total_logprob, r.bits_per_byte,
                           list(r.logprobs))

    def tokenize(self, text: str, *, timeout: Optional[float] = None) -> List[int]:
        r = self._unary(self._generation.Tokenize, generation_pb2.TokenizeRequest(text=text),
                        timeout)
        return list(r.ids)

    # --- Sessions -----------------------------------------------------------------------------

    def create_session(self, session_id: str = "", *, knn_capacity: int = 0,
                       timeout: Optional[float] = None) -> Session:
        """knn_capacity: kNN memory entries per head (0 = the server's --knn_capacity)."""
        r = self._unary(self._sessions.CreateSession,
                        sessions_pb2.CreateSessionRequest(session_id=session_id,
                                                          knn_capacity=knn_capacity), timeout)
        return _session_from_proto(r)

    def get_session(self, session_id: str, *, timeout: Optional[float] = None) -> Session:
        r = self._unary(self._sessions.GetSession,
                        sessions_pb2.GetSessionRequest(session_id=session_id), timeout)
        return _session_from_proto(r)

    def list_sessions(self, *, timeout: Optional[float] = None) -> List[Session]:
        """Every session, following pagination."""
        sessions: List[Session] = []
        token = ""
        while True:
            r = self._unary(self._sessions.ListSessions,
                            sessions_pb2.ListSessionsRequest(page_size=1000, page_token=token),
                            timeout)
            sessions.extend(_session_from_proto(s) for s in r.sessions)
            token = r.next_page_token
            if not token:
                return sessions

    def delete_session(self, session_id: str, *, timeout: Optional[float] = None) -> None:
        self._unary(self._sessions.DeleteSession,
                    sessions_pb2.DeleteSessionRequest(session_id=session_id), timeout)

    # --- Datastores ---------------------------------------------------------------------------

    def list_datastores(self, *, timeout: Optional[float] = None) -> List[Datastore]:
        """Every shared datastore (sorted by name), following pagination."""
        datastores: List[Datastore] = []
        token = ""
        while True:
            r = self._unary(self._datastores.ListDatastores,
                            datastores_pb2.ListDatastoresRequest(page_size=1000,
                                                                 page_token=token),
                            timeout)
            datastores.extend(_datastore_from_proto(d) for d in r.datastores)
            token = r.next_page_token
            if not token:
                return datastores

    def get_datastore(self, name: str, session_id: str = "", *,
                      timeout: Optional[float] = None) -> Datastore:
        """A shared datastore by name, or name="session" with a session_id: that session's
        private datastore (entries 0 until text is added to it)."""
        r = self._unary(self._datastores.GetDatastore,
                        datastores_pb2.GetDatastoreRequest(name=name, session_id=session_id),
                        timeout)
        return _datastore_from_proto(r)

    def add_to_session_datastore(self, session_id: str, text: str, *,
                                 timeout: Optional[float] = None) -> AddToDatastoreResult:
        """Adds one entry per token of `text` to the session's private datastore (read with a
        fresh memory; the session's own memory is unchanged). Use it with
        knn_lm=KnnLm("session") on that session."""
        r = self._unary(self._datastores.AddToSessionDatastore,
                        datastores_pb2.AddToSessionDatastoreRequest(session_id=session_id,
                                                                    text=text),
                        timeout)
        return AddToDatastoreResult(r.entries_added, _datastore_from_proto(r.datastore))

    # --- Models and health --------------------------------------------------------------------

    def models(self, *, timeout: Optional[float] = None) -> List[ModelInfo]:
        models: List[ModelInfo] = []
        token = ""
        while True:
            r = self._unary(self._models.ListModels,
                            models_pb2.ListModelsRequest(page_token=token), timeout)
            models.extend(_model_from_proto(m) for m in r.models)
            token = r.next_page_token
            if not token:
                return models

    def health(self, service: str = "mnemo.v1.Generation", *,
               timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status name: "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", ..."""
        r = self._unary(self._health.Check, health_pb2.HealthCheckRequest(service=service),
                        timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def wait_until_serving(self, service: str = "mnemo.v1.Generation",
                           timeout: float = 60.0) -> None:
        """Polls health until SERVING; raises MnemoError(DEADLINE_EXCEEDED) after `timeout`."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                last = self.health(service, timeout=1.0)
                if last == "SERVING":
                    return
            except MnemoError as error:
                last = str(error)
            time.sleep(0.1)
        raise MnemoError(grpc.StatusCode.DEADLINE_EXCEEDED,
                         f"{service} not SERVING after {timeout}s (last: {last})")
