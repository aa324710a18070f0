"""The bad input table for test_bad_input.py: every field of every mnemo.v1 request message, with
its bad values and the answer each must get, or the reason it has none.

A field's entry (`Spec`) lists its cases: out-of-range numbers (`Range`), values over a
documented cap (`Oversize`) and other bad values (`Value`). Every numeric or bool field needs
range cases or `no_range`, every string, bytes, repeated or map field oversize cases or
`no_oversize`; test_bad_input.py checks that, and adds the cases it derives from the descriptors
itself (each wrong wire type, malformed UTF-8 in strings, unknown enum values).

The expected answer is INVALID_ARGUMENT naming the field (its dotted path) unless the case says
otherwise; any other code must say why (docs/api.md's documented code), and `mentions` replaces
the field-name check where the documented message names the value rather than the field
(e.g. NOT_FOUND "session 'x' not found").
"""

import grpc

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
ALREADY_EXISTS = grpc.StatusCode.ALREADY_EXISTS
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
DATA_LOSS = grpc.StatusCode.DATA_LOSS

# The server's limits in this test (SERVER_ARGS below), so the table's numbers are visible here.
MAX_NEW_TOKENS = 2048                         # --max_new_tokens (test_e2e's MAX_NEW_TOKENS_CAP)
MAX_TOP_LOGPROBS = 20                         # the engine's cap on logprobs
MAX_KNN_CAPACITY = 4096                       # --max_knn_capacity
MAX_REMEMBER_CAPACITY = 65536                 # --max_remember_capacity
MAX_SESSION_TTL_S = 3600                      # --max_session_ttl
MAX_SESSION_DATASTORE_ENTRIES = 64            # --max_session_datastore_entries
MAX_REQUEST_BYTES = 1 << 20                   # --max_request_bytes
MAX_CHUNK_BYTES = 4 << 20                     # ExportSession.chunk_bytes cap (docs/api.md)
MAX_KNN_K = 1024                              # knn_lm.k cap (docs/api.md)
SESSION_ID_MAX = 128                          # session id length cap (docs/api.md)
DATASTORE_NAME_MAX = 64                       # datastore names have 1 to 64 characters

INT32_MAX, INT32_MIN = 2**31 - 1, -2**31
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63
NAN, INF = float("nan"), float("inf")

SID = "bad-input-session"          # a live session (no remember, no private datastore)
UNKNOWN_SID = "zz-never-created"   # a well-formed id no session has
CANARY = "canary"                  # <workdir>/canary.snap: outside --session_dir

SERVER_ARGS = [
    "--max_knn_capacity", str(MAX_KNN_CAPACITY),
    "--knn_capacity", "256",
    "--max_remember_capacity", str(MAX_REMEMBER_CAPACITY),
    "--remember_capacity", str(MAX_REMEMBER_CAPACITY // 4),
    "--max_session_ttl", f"{MAX_SESSION_TTL_S}s",
    "--max_session_datastore_entries", str(MAX_SESSION_DATASTORE_ENTRIES),
    "--max_request_bytes", str(MAX_REQUEST_BYTES),
]


class Case:
    """One bad value for one field.

    kind: "range" (a number out of range), "oversize" (over a documented cap) or "value"
    (any other bad value). `value` replaces the field (a list for a repeated field, a dict for a
    map). `sibling` is set on the message that holds the field and `top` on the request first,
    so that the field under test is the first thing wrong. `then` adds further messages to a
    client stream. `code` other than INVALID_ARGUMENT needs `why`; `mentions` replaces the check
    that the message names the field where the documented message names the value instead.
    """

    def __init__(self, kind, value, *, code=INVALID, why=None, mentions=None, sibling=None,
                 top=None, then=None, label=None):
        self.kind = kind
        self.value = value
        self.code = code
        self.why = why
        self.mentions = mentions
        self.sibling = sibling or {}
        self.top = top or {}
        self.then = then or []
        self.label = label


def Range(value, **kw):
    return Case("range", value, **kw)


def Oversize(value, **kw):
    return Case("oversize", value, **kw)


def Value(value, **kw):
    return Case("value", value, **kw)


class Spec:
    """A field's table entry: its cases, and why it has no range or no oversize cases."""

    def __init__(self, *cases, no_range=None, no_oversize=None):
        self.cases = list(cases)
        self.no_range = no_range
        self.no_oversize = no_oversize


def Nested():
    """A singular sub-message field: its own fields are swept under its dotted name."""
    return Spec()


BOOL = "a bool: both values are valid (its wrong wire types are still swept)"
SEED = "any uint64 is a valid seed"
NO_CAP = ("no per-field cap is documented; the request as a whole is capped by "
          "--max_request_bytes (test_request_over_max_request_bytes)")
NOT_FOUND_ID = "docs/api.md: an unknown session id is NOT_FOUND; the message names the id"


def malformed_session_ids(**kw):
    """Session ids the API rejects: [A-Za-z0-9._-], 1 to 128 characters."""
    return [
        Value("bad id!", **kw),
        Value("../" + CANARY, label="path traversal", **kw),
        Value("a/b", **kw),
        Value("\u00e9t\u00e9", label="valid UTF-8, not an id character", **kw),
        Value("tab\there", **kw),
        Oversize("s" * (SESSION_ID_MAX + 1), **kw),
        Oversize("s" * 4096, **kw),
    ]


def unknown_session(**kw):
    return Value(UNKNOWN_SID, code=NOT_FOUND, why=NOT_FOUND_ID,
                 mentions=f"'{UNKNOWN_SID}' not found", **kw)


def token_id_cases(field, vocab, **kw):
    """Ids outside [0, vocab): the message names the first bad one, e.g. `ids[1] = -1`."""
    return [
        Range([-1], mentions=f"{field}[0] = -1", **kw),
        Range([INT32_MIN], mentions=f"{field}[0] = {INT32_MIN}", **kw),
        Range([vocab], mentions=f"{field}[0] = {vocab}", **kw),
        Range([INT32_MAX], mentions=f"{field}[0] = {INT32_MAX}", **kw),
        Range([65, 66, vocab + 7], mentions=f"{field}[2] = {vocab + 7}", **kw),
    ]


def unit_interval_cases(closed_low=True, **kw):
    """A float in [0, 1] (or (0, 1] when not closed_low)."""
    cases = [Range(-0.1, **kw), Range(1.5, **kw), Range(NAN, **kw), Range(INF, **kw),
             Range(-INF, **kw)]
    if not closed_low:
        cases.insert(0, Range(0.0, **kw))
    return cases


def page_cases():
    return {
        "page_size": Spec(Range(-1), Range(1001), Range(INT32_MAX), Range(INT32_MIN)),
        "page_token": Spec(Value("not base64!"), Value("eHl6", label="base64 of 'xyz', not ours"),
                           no_oversize=NO_CAP),
    }


def build_table(vocab):
    """table[message full name][field name] = Spec; `vocab` is the served model's vocabulary
    size."""
    knn = {"datastore": "session"}  # so the field under test is the first kNN-LM check to fail
    return {
        "mnemo.v1.GenerateRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
            "prompt": Spec(
                Value("", top={"session_id": ""},
                      label="empty without a session_id or prompt_token_ids"),
                Value("hi", top={"prompt_token_ids": [72]},
                      label="set with prompt_token_ids"),
                no_oversize=NO_CAP),
            "max_new_tokens": Spec(Range(-1), Range(INT32_MIN), Range(MAX_NEW_TOKENS + 1),
                                   Range(INT32_MAX)),
            "sampling": Nested(),
            "stop": Spec(Value([""], mentions="stop[0]", label="empty stop string"),
                         Value(["ok", ""], mentions="stop[1]", label="empty stop string"),
                         no_oversize=NO_CAP),
            "logprobs": Spec(Range(-1), Range(MAX_TOP_LOGPROBS + 1), Range(INT32_MAX),
                             Range(INT32_MIN)),
            "early_exit": Nested(),
            "knn_lm": Nested(),
            "stop_at_eos": Spec(no_range=BOOL),
            "prompt_token_ids": Spec(*token_id_cases("prompt_token_ids", vocab,
                                                     top={"prompt": ""}),
                                     no_oversize=NO_CAP),
            "stop_token_ids": Spec(*token_id_cases("stop_token_ids", vocab),
                                   no_oversize=NO_CAP),
            "recall": Nested(),
        },
        "mnemo.v1.SamplingParams": {
            "temperature": Spec(Range(-0.5), Range(-INF), Range(NAN), Range(INF)),
            "top_k": Spec(Range(-1), Range(INT32_MIN)),
            "top_p": Spec(*unit_interval_cases(closed_low=False)),
            "seed": Spec(no_range=SEED),
            "repetition_penalty": Spec(Range(0.0), Range(-1.0), Range(NAN), Range(INF),
                                       Range(-INF)),
            "min_p": Spec(*unit_interval_cases()),
            "presence_penalty": Spec(Range(-2.5), Range(2.5), Range(NAN), Range(INF),
                                     Range(-INF)),
            "frequency_penalty": Spec(Range(-2.5), Range(2.5), Range(NAN), Range(INF),
                                      Range(-INF)),
            "logit_bias": Spec(
                Range({-1: 1.0}, mentions="sampling.logit_bias[-1]"),
                Range({INT32_MIN: 1.0}, mentions=f"sampling.logit_bias[{INT32_MIN}]"),
                Range({vocab: 1.0}, mentions=f"sampling.logit_bias[{vocab}]"),
                Range({INT32_MAX: 0.0}, mentions=f"sampling.logit_bias[{INT32_MAX}]"),
                Range({65: NAN}, mentions="sampling.logit_bias[65]"),
                Range({65: INF}, mentions="sampling.logit_bias[65]"),
                Range({65: -INF}, mentions="sampling.logit_bias[65]"),
                no_oversize=NO_CAP),
        },
        "mnemo.v1.EarlyExit": {
            "enabled": Spec(
                Value(True, sibling={"threshold": 0.5}, top={"knn_lm": {"datastore": "session"}},
                      mentions="early_exit cannot be combined with knn_lm",
                      label="combined with knn_lm"),
                no_range=BOOL),
            "threshold": Spec(*unit_interval_cases(closed_low=False)),
            "measure": Spec(Value(3, label="EXIT_MEASURE_CLASSIFIER: the model has no classifier")),
        },
        "mnemo.v1.KnnLm": {
            "datastore": Spec(
                Value("wiki", code=NOT_FOUND, why="docs/api.md: a datastore this server has "
                      "not loaded is NOT_FOUND naming knn_lm.datastore"),
                Value("session", top={"session_id": "", "prompt": "hi", "text": "hi"},
                      label="\"session\" without a session_id"),
                Value("", sibling={"k": 4}, label="empty with k set"),
                Oversize("d" * (DATASTORE_NAME_MAX + 1), code=NOT_FOUND,
                         why="names have 1 to 64 characters, so no longer name is loaded: "
                         "NOT_FOUND naming knn_lm.datastore")),
            "lambda": Spec(*unit_interval_cases(sibling=knn)),
            "k": Spec(Range(-1, sibling=knn), Range(MAX_KNN_K + 1, sibling=knn),
                      Range(INT32_MAX, sibling=knn), Range(INT32_MIN, sibling=knn)),
            "temperature": Spec(Range(0.0, sibling=knn), Range(-1.0, sibling=knn),
                                Range(NAN, sibling=knn), Range(INF, sibling=knn),
                                Range(-INF, sibling=knn)),
        },
        "mnemo.v1.Recall": {
            "enabled": Spec(
                Value(True, code=FAILED_PRECONDITION, mentions="created without remember",
                      why="docs/api.md: recall on a session created without remember is "
                      "FAILED_PRECONDITION; the message names the session"),
                no_range=BOOL),
            "max_lambda": Spec(*unit_interval_cases()),
            "min_match_bytes": Spec(Range(0), Range(-1), Range(4097), Range(INT32_MAX),
                                    Range(INT32_MIN)),
        },
        "mnemo.v1.ScoreRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
            "text": Spec(Value("", label="neither text nor token_ids"),
                         Value("hi", top={"token_ids": [72, 105]},
                               label="set with token_ids"),
                         no_oversize=NO_CAP),
            "update_memory": Spec(no_range=BOOL),
            "knn_lm": Nested(),
            "token_logprobs": Spec(no_range=BOOL),
            "token_ids": Spec(*token_id_cases("token_ids", vocab, top={"text": ""}),
                              Value([72], top={"text": "", "session_id": ""},
                                    label="one id in a one-shot request"),
                              no_oversize=NO_CAP),
            "recall": Nested(),
        },
        "mnemo.v1.TokenizeRequest": {
            "text": Spec(no_oversize=NO_CAP),
            "add_special_tokens": Spec(no_range=BOOL),
        },
        "mnemo.v1.DetokenizeRequest": {
            "ids": Spec(*token_id_cases("ids", vocab), no_oversize=NO_CAP),
            "skip_special_tokens": Spec(no_range=BOOL),
        },
        "mnemo.v1.CreateSessionRequest": {
            "session_id": Spec(
                *malformed_session_ids(),
                Value(SID, code=ALREADY_EXISTS, mentions=f"'{SID}' already exists",
                      why="docs/api.md: an id that is live already is ALREADY_EXISTS; the "
                      "message names the id")),
            "knn_capacity": Spec(Range(-1), Range(MAX_KNN_CAPACITY + 1), Range(INT64_MAX),
                                 Range(INT64_MIN)),
            "remember": Spec(no_range=BOOL),
            "remember_capacity": Spec(
                Range(-1, sibling={"remember": True}),
                Range(MAX_REMEMBER_CAPACITY + 1, sibling={"remember": True}),
                Range(INT64_MAX, sibling={"remember": True}),
                Range(INT64_MIN, sibling={"remember": True}),
                Range(-1, label="without remember"),
                Range(MAX_REMEMBER_CAPACITY + 1, label="without remember")),
            "ttl_seconds": Spec(Range(-1), Range(MAX_SESSION_TTL_S + 1), Range(INT64_MAX),
                                Range(INT64_MIN)),
            "pinned": Spec(no_range=BOOL),
        },
        "mnemo.v1.GetSessionRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
        },
        "mnemo.v1.ListSessionsRequest": page_cases(),
        "mnemo.v1.DeleteSessionRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
        },
        "mnemo.v1.ExportSessionRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
            "chunk_bytes": Spec(Range(-1), Range(MAX_CHUNK_BYTES + 1), Range(INT32_MAX),
                                Range(INT32_MIN)),
        },
        "mnemo.v1.ImportSessionRequest": {
            "session_id": Spec(
                *malformed_session_ids(),
                Value(SID, code=ALREADY_EXISTS, mentions=f"'{SID}' already exists",
                      why="docs/api.md: importing under a live id is ALREADY_EXISTS; the "
                      "message names the id"),
                Value("imported-later", then=[{"session_id": "other-id", "data": b""}],
                      label="a different session_id in a later message")),
            "data": Spec(
                Value(b"not a snapshot", code=DATA_LOSS, mentions="the imported snapshot",
                      why="docs/api.md: damaged snapshot bytes are DATA_LOSS; the message "
                      "says it is the imported snapshot (the data of all the messages)"),
                Value(b"", code=DATA_LOSS, mentions="the imported snapshot",
                      why="docs/api.md: damaged (here: no) snapshot bytes are DATA_LOSS"),
                no_range="bytes", no_oversize="the documented cap is 16 GiB "
                "(RESOURCE_EXHAUSTED): too large to send in a test"),
        },
        "mnemo.v1.ForkSessionRequest": {
            "session_id": Spec(*malformed_session_ids(), unknown_session()),
            "new_session_id": Spec(
                *malformed_session_ids(),
                Value(SID, code=ALREADY_EXISTS, mentions=f"'{SID}' already exists",
                      why="an id that is live already is ALREADY_EXISTS (as CreateSession); "
                      "the message names the id")),
        },
        "mnemo.v1.ListModelsRequest": page_cases(),
        "mnemo.v1.GetModelRequest": {
            "name": Spec(
                Value(""),
                Value("no-such-model", code=NOT_FOUND, mentions='"no-such-model" not found',
                      why="docs/api.md: an unknown model is NOT_FOUND; the message names it"),
                no_oversize=("any name but the served model's is NOT_FOUND (above); no cap is "
                             "documented")),
        },
        "mnemo.v1.ListDatastoresRequest": page_cases(),
        "mnemo.v1.GetDatastoreRequest": {
            "name": Spec(
                Value("wiki", code=NOT_FOUND, mentions='"wiki" is not loaded',
                      why="docs/api.md: an unknown datastore is NOT_FOUND listing the loaded "
                      "ones; the message names the datastore"),
                Oversize("d" * (DATASTORE_NAME_MAX + 1), code=NOT_FOUND,
                         mentions="is not loaded",
                         why="names have 1 to 64 characters, so no longer name is loaded")),
            "session_id": Spec(
                Value("", label="\"session\" without a session_id"),
                *malformed_session_ids(), unknown_session()),
        },
        "mnemo.v1.AddToSessionDatastoreRequest": {
            "session_id": Spec(Value("", label="empty"), *malformed_session_ids(),
                               unknown_session()),
            "text": Spec(
                Value(""),
                Oversize("x" * (MAX_SESSION_DATASTORE_ENTRIES + 1), code=RESOURCE_EXHAUSTED,
                         mentions="--max_session_datastore_entries",
                         why="docs/api.md: more entries than --max_session_datastore_entries "
                         "would hold is RESOURCE_EXHAUSTED; the message names the flag")),
        },
    }


# Each method's valid request: a case changes one field of it (plus the case's context).
def base_requests(model_name):
    return {
        "Generate": {"session_id": SID, "prompt": "hi", "max_new_tokens": 1},
        "Score": {"session_id": SID, "text": "hi"},
        "Tokenize": {"text": "hi"},
        "Detokenize": {"ids": [72, 105]},
        "CreateSession": {"knn_capacity": 64},
        "GetSession": {"session_id": SID},
        "ListSessions": {},
        "DeleteSession": {"session_id": UNKNOWN_SID},
        "ExportSession": {"session_id": SID},
        "ImportSession": {},  # the snapshot of SID under a fresh session_id (base_message)
        "ForkSession": {"session_id": SID},  # a fresh new_session_id per case
        "ListModels": {},
        "GetModel": {"name": model_name},
        "ListDatastores": {},
        "GetDatastore": {"name": "session", "session_id": SID},
        "AddToSessionDatastore": {"session_id": SID, "text": "ab"},
    }
