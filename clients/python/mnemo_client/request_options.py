"""Building mnemo.v1 request messages from keyword arguments.

`fill_sampling` writes a generate call's sampling knobs into `SamplingParams`, `token_ids`
checks id lists before they go on the wire, and `KnnLm` / `fill_knn_lm` / `exit_measure`
translate the kNN-LM and CALM options. `Client` (client.py) calls these; nothing here talks
to the network.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, List, Mapping, Optional, Union

from mnemo_client._stubs import generation_pb2


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


def knn_lm_from(value: Optional[KnnLmLike]) -> Optional[KnnLm]:
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


def fill_knn_lm(value: Optional[KnnLmLike], out: generation_pb2.KnnLm) -> None:
    knn = knn_lm_from(value)
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


def exit_measure(name: str) -> int:
    values = {
        "softmax": generation_pb2.EXIT_MEASURE_SOFTMAX_RESPONSE,
        "saturation": generation_pb2.EXIT_MEASURE_HIDDEN_SATURATION,
        "classifier": generation_pb2.EXIT_MEASURE_CLASSIFIER,
    }
    if name not in values:
        raise ValueError(f"exit_measure must be one of {', '.join(EXIT_MEASURES)}, got {name!r}")
    return values[name]


def token_ids(name: str, ids: Optional[Iterable[int]]) -> List[int]:
    """`ids` as a list of ints (empty for None). Raises TypeError for a non-integer (bool
    included) or a str, which would otherwise be read as its characters; range checks are the
    server's (it knows the vocabulary)."""
    if ids is None:
        return []
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of ints, not {type(ids).__name__}")
    out = list(ids)
    for i, value in enumerate(out):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}[{i}] must be an int, got {value!r}")
    return out


def fill_sampling(
    out: generation_pb2.SamplingParams,
    *,
    temperature: Optional[float] = None,
    top_k: int = 0,
    top_p: Optional[float] = None,
    seed: Optional[int] = None,
    repetition_penalty: Optional[float] = None,
    min_p: float = 0.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    logit_bias: Optional[Mapping[int, float]] = None,
) -> None:
    """Writes the sampling knobs into `out`. None leaves an optional field unset (the server's
    default); 0 turns min_p and the penalties off; see `Client.generate` for each knob."""
    out.top_k = top_k
    if temperature is not None:
        out.temperature = temperature
    if top_p is not None:
        out.top_p = top_p
    if seed is not None:
        out.seed = seed
    if repetition_penalty is not None:
        out.repetition_penalty = repetition_penalty
    out.min_p = min_p
    out.presence_penalty = presence_penalty
    out.frequency_penalty = frequency_penalty
    for token_id, bias in (logit_bias or {}).items():
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise TypeError(f"logit_bias keys must be token ids (int), got {token_id!r}")
        out.logit_bias[token_id] = float(bias)


@dataclasses.dataclass
class Recall:
    """Recall from the sequence's own history for one Generate or Score call (generation.proto
    `Recall`, docs/recall.md).

    enabled: None = on for a session created with remember, off otherwise; True on a one-shot
      call remembers its own prompt as it is read.
    max_lambda: λ of a long unanimous match in [0, 1] (None = 0.9).
    min_match_bytes: shorter matches are not used (None = 8).
    """

    enabled: Optional[bool] = None
    max_lambda: Optional[float] = None
    min_match_bytes: Optional[int] = None


RecallLike = Union[Recall, bool, Mapping[str, Any]]


def fill_recall(value: Optional[RecallLike], out: generation_pb2.Recall) -> None:
    """Accepts a Recall, a bool (enabled) or a dict of Recall's fields."""
    if value is None:
        return
    if isinstance(value, bool):
        value = Recall(enabled=value)
    elif not isinstance(value, Recall):
        fields = dict(value)
        unknown = set(fields) - {"enabled", "max_lambda", "min_match_bytes"}
        if unknown:
            raise ValueError(f"recall: unknown keys {sorted(unknown)} "
                             "(expected enabled, max_lambda, min_match_bytes)")
        value = Recall(**fields)
    if value.enabled is not None:
        out.enabled = value.enabled
    if value.max_lambda is not None:
        out.max_lambda = value.max_lambda
    if value.min_match_bytes is not None:
        out.min_match_bytes = value.min_match_bytes
