"""A small typed wrapper over the mnemo.v1 gRPC stubs.

`Client` owns one insecure channel. Every call takes the client's default timeout (seconds)
unless given its own. Errors surface as `MnemoError` carrying the gRPC status code and the
server's message; streaming generation is an iterator of `Chunk`s that can be cancelled.
The values returned live in results.py; how keyword arguments become request fields
(sampling knobs, kNN-LM, exit measures, token ids) in request_options.py. Every call that
names a session sends it as the metadata header `x-mnemo-session`, which a router in front of
several replicas hashes (deploy/README.md).
"""

from __future__ import annotations

import os
import time
from typing import Iterable, Iterator, List, Mapping, Optional

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
from mnemo_client.request_options import (  # noqa: F401 (KnnLm, EXIT_MEASURES: re-exported)
    EXIT_MEASURES,
    KnnLm,
    KnnLmLike,
    Recall,
    RecallLike,
    fill_knn_lm,
    fill_recall,
    fill_sampling,
)
# Aliased: generate() and score() have keyword arguments of these names.
from mnemo_client.request_options import exit_measure as _exit_measure
from mnemo_client.request_options import token_ids as _token_ids
from mnemo_client.results import (  # noqa: F401 (re-exported: mnemo_client.client.X still works)
    AddToDatastoreResult,
    Chunk,
    Datastore,
    ModelInfo,
    ScoreResult,
    Session,
    SessionMemory,
    TokenAlternative,
    TokenInfo,
    Usage,
    chunk_from_proto,
    datastore_from_proto,
    model_from_proto,
    session_from_proto,
)


# gRPC metadata key naming the session a call works on. A router in front of several replicas
# (deploy/nginx/mnemo.conf, deploy/envoy/envoy.yaml) hashes it, so every call on one session
# reaches the replica that holds it; calls without a session carry no such key.
SESSION_HEADER = "x-mnemo-session"



def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class MnemoError(Exception):
    """A non-OK gRPC status from the server (or the channel)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "MnemoError":
        return cls(error.code(), error.details() or "")


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
        chunk = chunk_from_proto(msg)
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
      api_key: sent with every call as `authorization: Bearer KEY` (servers started with
        --auth_keys require one); default: the MNEMO_API_KEY environment variable.
      tls: connect with TLS (implied by tls_ca / tls_cert); without tls_ca the system's CA
        roots check the server.
      tls_ca: PEM file of the CA that signed the server's certificate.
      tls_cert, tls_key: PEM files of this client's certificate and key (mutual TLS).
      tls_server_name: the name the server's certificate must carry when it differs from the
        address's host.
    """

    def __init__(self, address: str = "127.0.0.1:50051", timeout: Optional[float] = 60.0, *,
                 api_key: Optional[str] = None, tls: bool = False, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None):
        self.address = address
        self.timeout = timeout
        if api_key is None:
            api_key = os.environ.get("MNEMO_API_KEY", "").strip() or None
        self._auth = (("authorization", "Bearer " + api_key),) if api_key else ()
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("a client certificate needs both tls_cert and tls_key")
        if tls or tls_ca or tls_cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca), private_key=_read(tls_key),
                certificate_chain=_read(tls_cert))
            options = ([("grpc.ssl_target_name_override", tls_server_name)]
                       if tls_server_name else [])
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
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

    def _metadata(self, session_id: str = "") -> Optional[tuple]:
        """A call's metadata: the API key, and for a call on `session_id` the routing header."""
        metadata = self._auth + (((SESSION_HEADER, session_id),) if session_id else ())
        return metadata or None

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _unary(self, method, request, timeout, session_id: str = ""):
        try:
            return method(request, timeout=self._timeout(timeout),
                          metadata=self._metadata(session_id))
        except grpc.RpcError as error:
            raise MnemoError.from_rpc_error(error) from None

    # --- Generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompt: str = "",
        *,
        prompt_token_ids: Optional[Iterable[int]] = None,
        session_id: str = "",
        max_new_tokens: int = 0,
        temperature: Optional[float] = None,
        top_k: int = 0,
        top_p: Optional[float] = None,
        seed: Optional[int] = None,
        repetition_penalty: Optional[float] = None,
        min_p: float = 0.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Optional[Mapping[int, float]] = None,
        stop: Iterable[str] = (),
        stop_token_ids: Iterable[int] = (),
        logprobs: int = 0,
        stop_at_eos: Optional[bool] = None,
        knn_lm: Optional[KnnLmLike] = None,
        recall: Optional[RecallLike] = None,
        early_exit: bool = False,
        exit_threshold: Optional[float] = None,
        exit_measure: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> GenerateStream:
        """Starts a streaming generation; iterate the result for `Chunk`s.

        The prompt is `prompt` (text; a fresh sequence starts with the model's BOS when it
        has one) or `prompt_token_ids` (ids fed exactly as given, no BOS added: use
        `tokenize(text, add_special_tokens=True)` for the text's ids with BOS); set one. Both
        may be left empty only with a session_id.

        Unset sampling fields take the server's defaults (temperature 1.0, top_p 1.0, a random
        seed, repetition_penalty 1.0); temperature=0 is greedy. `min_p` in [0, 1] keeps the
        tokens whose probability is at least min_p times the most likely one's;
        `presence_penalty` and `frequency_penalty` in [-2, 2] (OpenAI's) lower a token's logit
        by presence * [count > 0] + frequency * count over the tokens generated so far;
        `logit_bias` ({token id: bias}) is added to the logits (-100 bans a token). All off
        by default. `stop` (strings) and `stop_token_ids` end the stream with finish reason
        "STOP"; the match, or the stop token, is part of the output.
        `knn_lm` (a `KnnLm` or a dict with datastore, lambda_, k, temperature) mixes a
        datastore's neighbours into every generated token's distribution; request errors
        surface when the stream is read. `recall` (a `Recall`, a bool or a dict) mixes in the
        continuation of the longest earlier context of the session's own history that matches
        (docs/recall.md); None = on for a session created with remember.
        `early_exit` turns on CALM early exit (each token reports its `exit_layer`);
        `exit_measure` picks the confidence it exits on ("softmax", "saturation" or
        "classifier"; None = the model's default) and `exit_threshold` in (0, 1] overrides the
        model's calibrated threshold for that measure. Raises ValueError for an unknown
        measure name, TypeError for ids that are not ints.
        """
        request = generation_pb2.GenerateRequest(
            session_id=session_id, prompt=prompt,
            prompt_token_ids=_token_ids("prompt_token_ids", prompt_token_ids),
            max_new_tokens=max_new_tokens, stop=list(stop),
            stop_token_ids=_token_ids("stop_token_ids", stop_token_ids), logprobs=logprobs)
        fill_sampling(request.sampling, temperature=temperature, top_k=top_k, top_p=top_p,
                      seed=seed, repetition_penalty=repetition_penalty, min_p=min_p,
                      presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                      logit_bias=logit_bias)
        if stop_at_eos is not None:
            request.stop_at_eos = stop_at_eos
        fill_knn_lm(knn_lm, request.knn_lm)
        fill_recall(recall, request.recall)
        request.early_exit.enabled = early_exit
        if exit_threshold is not None:
            request.early_exit.threshold = exit_threshold
        if exit_measure is not None:
            request.early_exit.measure = _exit_measure(exit_measure)
        call = self._generation.Generate(request, timeout=self._timeout(timeout),
                                         metadata=self._metadata(session_id))
        return GenerateStream(call)

    def score(self, text: str = "", *, token_ids: Optional[Iterable[int]] = None,
              session_id: str = "", update_memory: bool = False, token_logprobs: bool = False,
              knn_lm: Optional[KnnLmLike] = None, recall: Optional[RecallLike] = None,
              timeout: Optional[float] = None) -> ScoreResult:
        """Log-likelihood of `text`, or of `token_ids` (set one); with `knn_lm`, under the
        kNN-LM mixture (as in generate); with `recall`, under recall (as in generate; the
        scored tokens are remembered as they are read).

        Each token is scored given everything before it. On a fresh sequence (one-shot, or a
        session never fed) the first token has nothing before it: it is scored only when a BOS
        was primed in front of it, which happens for `text` on models with a BOS and never for
        `token_ids` (ids[0] is then context only: a one-shot call needs two ids). bits_per_byte
        is over the UTF-8 bytes of the scored tokens.
        """
        request = generation_pb2.ScoreRequest(
            session_id=session_id, text=text,
            token_ids=_token_ids("token_ids", token_ids), update_memory=update_memory,
            token_logprobs=token_logprobs)
        fill_knn_lm(knn_lm, request.knn_lm)
        fill_recall(recall, request.recall)
        r = self._unary(self._generation.Score, request, timeout, session_id)
        return ScoreResult(r.token_count, r.byte_count, r.total_logprob, r.bits_per_byte,
                           list(r.logprobs))

    def tokenize(self, text: str, *, add_special_tokens: bool = False,
                 timeout: Optional[float] = None) -> List[int]:
        """The ids of `text`; with add_special_tokens, preceded by the model's BOS when it has
        one (the ids the text is fed as on a fresh sequence)."""
        r = self._unary(self._generation.Tokenize,
                        generation_pb2.TokenizeRequest(text=text,
                                                       add_special_tokens=add_special_tokens),
                        timeout)
        return list(r.ids)

    def detokenize(self, ids: Iterable[int], *, skip_special_tokens: bool = False,
                   timeout: Optional[float] = None) -> str:
        """The text `ids` stand for (invalid UTF-8 reads as U+FFFD). Special tokens are left
        out with skip_special_tokens, else written as markers ("<|bos|>", "<|eos|>",
        "<|pad|>", "<|special:ID|>"). Out-of-range ids raise MnemoError(INVALID_ARGUMENT)."""
        r = self._unary(self._generation.Detokenize,
                        generation_pb2.DetokenizeRequest(
                            ids=_token_ids("ids", ids), skip_special_tokens=skip_special_tokens),
                        timeout)
        return r.text

    # --- Sessions -----------------------------------------------------------------------------

    def create_session(self, session_id: str = "", *, knn_capacity: int = 0,
                       remember: bool = False, remember_capacity: int = 0,
                       ttl_seconds: int = 0, pinned: bool = False,
                       timeout: Optional[float] = None) -> Session:
        """knn_capacity: kNN memory entries per head (0 = the server's --knn_capacity).
        remember: keep every token the session reads and generates for recall (then on by
        default in its generate and score calls); remember_capacity: tokens kept (0 = the
        server's --remember_capacity). ttl_seconds: idle time after which the session is
        deleted (0 = the server's --session_ttl); pinned: never evicted nor expired (only
        delete_session removes it)."""
        r = self._unary(self._sessions.CreateSession,
                        sessions_pb2.CreateSessionRequest(
                            session_id=session_id, knn_capacity=knn_capacity,
                            remember=remember, remember_capacity=remember_capacity,
                            ttl_seconds=ttl_seconds, pinned=pinned), timeout,
                        session_id)
        return session_from_proto(r)

    def get_session(self, session_id: str, *, timeout: Optional[float] = None) -> Session:
        r = self._unary(self._sessions.GetSession,
                        sessions_pb2.GetSessionRequest(session_id=session_id), timeout,
                        session_id)
        return session_from_proto(r)

    def list_sessions(self, *, timeout: Optional[float] = None) -> List[Session]:
        """Every session, following pagination."""
        sessions: List[Session] = []
        token = ""
        while True:
            r = self._unary(self._sessions.ListSessions,
                            sessions_pb2.ListSessionsRequest(page_size=1000, page_token=token),
                            timeout)
            sessions.extend(session_from_proto(s) for s in r.sessions)
            token = r.next_page_token
            if not token:
                return sessions

    def delete_session(self, session_id: str, *, timeout: Optional[float] = None) -> None:
        self._unary(self._sessions.DeleteSession,
                    sessions_pb2.DeleteSessionRequest(session_id=session_id), timeout,
                    session_id)

    def export_session(self, session_id: str, *, timeout: Optional[float] = None) -> bytes:
        """The session as snapshot bytes (docs/durability.md): what import_session takes, on
        this server or another of the same model. FAILED_PRECONDITION while a request runs on
        the session."""
        call = self._sessions.ExportSession(
            sessions_pb2.ExportSessionRequest(session_id=session_id),
            timeout=self._timeout(timeout), metadata=self._metadata(session_id))
        try:
            return b"".join(chunk.data for chunk in call)
        except grpc.RpcError as error:
            raise MnemoError.from_rpc_error(error) from None

    def import_session(self, snapshot: bytes, session_id: str = "", *,
                       timeout: Optional[float] = None) -> Session:
        """A new session from export_session's bytes, under `session_id` (empty = the id it
        was exported with). ALREADY_EXISTS for a live id; FAILED_PRECONDITION for another
        model's snapshot; DATA_LOSS for damaged bytes."""
        chunk = 1 << 20

        def requests():
            yield sessions_pb2.ImportSessionRequest(session_id=session_id,
                                                    data=snapshot[:chunk])
            for start in range(chunk, len(snapshot), chunk):
                yield sessions_pb2.ImportSessionRequest(data=snapshot[start:start + chunk])

        try:
            r = self._sessions.ImportSession(requests(), timeout=self._timeout(timeout),
                                             metadata=self._metadata(session_id))
        except grpc.RpcError as error:
            raise MnemoError.from_rpc_error(error) from None
        return session_from_proto(r)

    def fork_session(self, session_id: str, new_session_id: str = "", *,
                     timeout: Optional[float] = None) -> Session:
        """A copy of the session under `new_session_id` (empty = server-generated); the two
        then go their own ways (branching a conversation)."""
        r = self._unary(self._sessions.ForkSession,
                        sessions_pb2.ForkSessionRequest(session_id=session_id,
                                                        new_session_id=new_session_id),
                        timeout, session_id)  # routed to the replica holding the source
        return session_from_proto(r)

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
            datastores.extend(datastore_from_proto(d) for d in r.datastores)
            token = r.next_page_token
            if not token:
                return datastores

    def get_datastore(self, name: str, session_id: str = "", *,
                      timeout: Optional[float] = None) -> Datastore:
        """A shared datastore by name, or name="session" with a session_id: that session's
        private datastore (entries 0 until text is added to it)."""
        r = self._unary(self._datastores.GetDatastore,
                        datastores_pb2.GetDatastoreRequest(name=name, session_id=session_id),
                        timeout, session_id)
        return datastore_from_proto(r)

    def add_to_session_datastore(self, session_id: str, text: str, *,
                                 timeout: Optional[float] = None) -> AddToDatastoreResult:
        """Adds one entry per token of `text` to the session's private datastore (read with a
        fresh memory; the session's own memory is unchanged). Use it with
        knn_lm=KnnLm("session") on that session."""
        r = self._unary(self._datastores.AddToSessionDatastore,
                        datastores_pb2.AddToSessionDatastoreRequest(session_id=session_id,
                                                                    text=text),
                        timeout, session_id)
        return AddToDatastoreResult(r.entries_added, datastore_from_proto(r.datastore))

    # --- Models and health --------------------------------------------------------------------

    def models(self, *, timeout: Optional[float] = None) -> List[ModelInfo]:
        models: List[ModelInfo] = []
        token = ""
        while True:
            r = self._unary(self._models.ListModels,
                            models_pb2.ListModelsRequest(page_token=token), timeout)
            models.extend(model_from_proto(m) for m in r.models)
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
