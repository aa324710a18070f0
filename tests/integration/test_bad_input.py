#!/usr/bin/python3
"""Bad input sweep: every field of every request message gets its bad values, and the server
answers each with INVALID_ARGUMENT naming the field (or the code docs/api.md documents for it).

The sweep walks every method of every service in proto/mnemo/v1/ through the Python descriptors,
recursing into sub-messages (sampling, early_exit, knn_lm, recall), so a field added later
without an entry in bad_input_table.py fails `test_table_covers_every_request_field`. For each
field path it sends:

  - the table's cases: out-of-range numbers (negative, huge, NaN/inf), values over documented
    caps, other bad values (malformed session ids, unknown names), each with its context (e.g.
    knn_lm.datastore set, so that knn_lm.k is the first thing wrong);
  - cases derived from the descriptor: every wire type the field does not take (the field
    number with another wire type, bytes crafted by hand; for a map, also in its entry's key
    and value), malformed UTF-8 in every string field, unknown values of every enum field.

Every request goes through a raw channel method (identity serializers), so the bytes on the wire
are exactly the ones built here. After the sweep the server must still be up and serve a normal
Generate, and no file outside --session_dir may have been touched (session ids name files
there: a canary ../canary.snap sits next to it).

Run by CTest with Debian's /usr/bin/python3 (MNEMO_SERVER and MNEMO_MODEL_TOOL from the
environment or build/). About 600 requests on loopback; the server start dominates the time.
"""

import importlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.environ.get("MNEMO_SOURCE_DIR", os.path.dirname(os.path.dirname(_HERE)))
sys.path.insert(0, _HERE)
# The sweep is only as complete as the descriptors: regenerate the Python stubs if a .proto is
# newer than them (a no-op when they are current, as after scripts/build.sh).
subprocess.run(["bash", os.path.join(_ROOT, "clients", "python", "generate_stubs.sh")],
               check=True, stdout=sys.stderr)

import grpc  # noqa: E402
from google.protobuf import descriptor as _descriptor  # noqa: E402

import server_harness as harness  # noqa: E402
from bad_input_table import (  # noqa: E402
    CANARY, INT32_MAX, INVALID, MAX_NEW_TOKENS, MAX_REQUEST_BYTES, RESOURCE_EXHAUSTED, SERVER_ARGS,
    SID, base_requests, build_table)
from mnemo_client import _stubs  # noqa: E402

FD = _descriptor.FieldDescriptor
# Every proto/mnemo/v1/*.proto (a new file is swept too), as the generated modules.
PROTO_MODULES = tuple(
    importlib.import_module(f"mnemo.v1.{os.path.splitext(name)[0]}_pb2")
    for name in sorted(os.listdir(os.path.join(_ROOT, "proto", "mnemo", "v1")))
    if name.endswith(".proto"))

# --- descriptors and wire bytes --------------------------------------------------------------

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5
ALL_WIRE_TYPES = {WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32}
_LEN_TYPES = (FD.TYPE_STRING, FD.TYPE_BYTES, FD.TYPE_MESSAGE)
_VARINT_TYPES = (FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_SINT32,
                 FD.TYPE_SINT64, FD.TYPE_BOOL, FD.TYPE_ENUM)
_FIXED32_TYPES = (FD.TYPE_FLOAT, FD.TYPE_FIXED32, FD.TYPE_SFIXED32)
_FIXED64_TYPES = (FD.TYPE_DOUBLE, FD.TYPE_FIXED64, FD.TYPE_SFIXED64)
_NUMERIC_TYPES = _VARINT_TYPES[:-2] + _FIXED32_TYPES + _FIXED64_TYPES

# Malformed UTF-8: a stray byte, an overlong '/', a UTF-16 surrogate, a truncated '€'.
BAD_UTF8 = (b"ok\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"x\xe2\x82")


def _modules_by_file():
    return {m.DESCRIPTOR.name: m for m in PROTO_MODULES}


def message_class(desc):
    return getattr(_modules_by_file()[desc.file.name], desc.name)


def is_map(field):
    return field.type == FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def is_repeated(field):
    return field.label == FD.LABEL_REPEATED


def methods():
    """(service, method) for every method of every service in the mnemo.v1 protos."""
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                yield service, method


def field_paths(desc, prefix=()):
    """Every field path of `desc`, sub-messages recursed (a map is one field)."""
    for field in desc.fields:
        path = prefix + (field,)
        yield path
        if field.type == FD.TYPE_MESSAGE and not is_map(field) and len(prefix) < 8:
            yield from field_paths(field.message_type, path)


def dotted(path):
    return ".".join(f.name for f in path)


def valid_wire_types(field):
    if field.type in _LEN_TYPES:
        return {WIRE_LEN}
    wire = ({WIRE_VARINT} if field.type in _VARINT_TYPES else
            {WIRE_FIXED32} if field.type in _FIXED32_TYPES else {WIRE_FIXED64})
    if is_repeated(field):
        wire.add(WIRE_LEN)  # packed
    return wire


def varint(n):
    n &= (1 << 64) - 1  # negative int32/int64 are ten-byte two's complement varints
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number, wire):
    return varint((number << 3) | wire)


def encode(number, wire, value=None):
    """One field's bytes with the given wire type (a default payload when value is None)."""
    if wire == WIRE_VARINT:
        return tag(number, wire) + varint(1 if value is None else value)
    if wire == WIRE_FIXED64:
        return tag(number, wire) + (value or struct.pack("<d", 1.0))
    if wire == WIRE_FIXED32:
        return tag(number, wire) + (value or struct.pack("<f", 1.0))
    payload = b"x" if value is None else value
    return tag(number, wire) + varint(len(payload)) + payload


def wrap(path, leaf):
    """`leaf` (the bytes of path[-1]) inside its parent messages' length-delimited fields."""
    data = leaf
    for field in reversed(path[:-1]):
        data = encode(field.number, WIRE_LEN, data)
    return data


def apply(message, patch):
    """Sets `patch` ({field: value}) on `message`: dicts into sub-messages and maps, lists
    replace repeated fields."""
    for name, value in patch.items():
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            continue  # context for another method (e.g. `text` on a Generate)
        set_field(message, field, value)


def set_field(message, field, value):
    if is_map(field):
        target = getattr(message, field.name)
        target.clear()
        target.update(value)
    elif is_repeated(field):
        target = getattr(message, field.name)
        del target[:]
        target.extend(value)
    elif field.type == FD.TYPE_MESSAGE:
        apply(getattr(message, field.name), value)
    else:
        setattr(message, field.name, value)


def names_field(message, path_name):
    """Whether `message` names the field: its dotted path as a whole word ("session_id" does not
    match inside "new_session_id"; "knn_lm.k" is followed by a space, '[' or the end)."""
    return re.search(r"(?<![\w.])" + re.escape(path_name) + r"(?![\w])", message) is not None


# --- the test --------------------------------------------------------------------------------


class BadInputTest(unittest.TestCase):
    """One server; the sweep, then checks that it is still up and that nothing leaked."""

    @classmethod
    def setUpClass(cls):
        assert MAX_NEW_TOKENS == harness.MAX_NEW_TOKENS_CAP, "the table's cap is the server's flag"
        for path in (harness.SERVER, harness.MODEL_TOOL):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"missing binary {path} (build with scripts/build.sh)")
        workdir = tempfile.mkdtemp(prefix="mnemo-bad-input-")
        cls.addClassCleanup(shutil.rmtree, workdir, ignore_errors=True)
        cls.session_dir = os.path.join(workdir, "sessions")
        os.makedirs(cls.session_dir)
        # Session ids name files under --session_dir: "../canary" must never reach this one.
        cls.canary = os.path.join(workdir, CANARY + ".snap")
        with open(cls.canary, "wb") as f:
            f.write(b"not a snapshot: a file outside --session_dir")
        server, client = harness.launch(
            workdir, SERVER_ARGS + ["--session_dir", cls.session_dir], cls.addClassCleanup)
        cls.server, cls.client = server, client
        cls.channel = grpc.insecure_channel(server.address, options=[
            ("grpc.max_send_message_length", 8 << 20)])
        cls.addClassCleanup(cls.channel.close)
        model = client.models()[0]
        cls.vocab = model.vocab_size
        cls.model_name = model.name
        client.create_session(SID, knn_capacity=64)
        cls.snapshot = client.export_session(SID)
        cls.table = build_table(cls.vocab)
        cls.bases = base_requests(cls.model_name)
        cls.serial = 0

    def setUp(self):
        self.assertIsNone(self.server.proc.poll(),
                          f"mnemo-server died:\n{self.server.log_tail()}")

    # --- calls --------------------------------------------------------------------------------

    def call(self, service, method, messages):
        """Sends raw request bytes; returns (code, details)."""
        path = f"/{service.full_name}/{method.name}"
        try:
            if method.client_streaming:
                self.channel.stream_unary(path)(iter(messages), timeout=30)
            elif method.server_streaming:
                for _ in self.channel.unary_stream(path)(messages[0], timeout=30):
                    pass
            else:
                self.channel.unary_unary(path)(messages[0], timeout=30)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
        return grpc.StatusCode.OK, ""

    def base_message(self, method):
        message = message_class(method.input_type)()
        apply(message, self.bases[method.name])
        # Methods that create a session get a fresh id each time, so that a case the server
        # wrongly accepts does not make the next one ALREADY_EXISTS.
        type(self).serial += 1
        if method.name == "ImportSession":
            message.session_id = f"imported-{self.serial}"
            message.data = self.snapshot
        if method.name == "ForkSession":
            message.new_session_id = f"forked-{self.serial}"
        return message

    def case_messages(self, method, path, case):
        message = self.base_message(method)
        apply(message, case.top)
        holder = message
        for field in path[:-1]:
            holder = getattr(holder, field.name)
        apply(holder, case.sibling)
        set_field(holder, path[-1], case.value)
        messages = [message.SerializeToString()]
        for later in case.then:
            extra = message_class(method.input_type)()
            apply(extra, later)
            messages.append(extra.SerializeToString())
        return messages

    def raw_messages(self, method, path, leaf):
        """The method's base request with `leaf` (raw bytes of path[-1]) appended: protobuf
        merges it into the request (the last value of a scalar wins)."""
        return [self.base_message(method).SerializeToString() + wrap(path, leaf)]

    # --- the sweep ----------------------------------------------------------------------------

    def sweep_cases(self):
        """(service, method, path, label, messages, code, mentions, kind) for every case."""
        for service, method in methods():
            for path in field_paths(method.input_type):
                field = path[-1]
                name = dotted(path)
                spec = self.table[field.containing_type.full_name][field.name]
                for case in spec.cases:
                    label = case.label or repr(case.value)[:40]
                    yield (service, method, name, f"{case.kind} {label}",
                           self.case_messages(method, path, case), case.code,
                           case.mentions, case.kind)
                for wire in sorted(ALL_WIRE_TYPES - valid_wire_types(field)):
                    yield (service, method, name, f"wire type {wire}",
                           self.raw_messages(method, path, encode(field.number, wire)),
                           INVALID, None, "wire")
                if is_map(field):  # a map entry's key and value, inside one entry
                    for sub in field.message_type.fields:
                        for wire in sorted(ALL_WIRE_TYPES - valid_wire_types(sub)):
                            leaf = encode(field.number, WIRE_LEN, encode(sub.number, wire))
                            yield (service, method, name, f"{sub.name} wire type {wire}",
                                   self.raw_messages(method, path, leaf), INVALID, None, "wire")
                if field.type == FD.TYPE_STRING:
                    for bad in BAD_UTF8:
                        yield (service, method, name, f"utf-8 {bad!r}",
                               self.raw_messages(method, path,
                                                 encode(field.number, WIRE_LEN, bad)),
                               INVALID, f"{name} is not valid UTF-8", "utf8")
                if field.type == FD.TYPE_ENUM:
                    top = max(v.number for v in field.enum_type.values)
                    for value in (top + 1, -1, INT32_MAX):
                        yield (service, method, name, f"enum {value}",
                               self.raw_messages(method, path,
                                                 encode(field.number, WIRE_VARINT, value)),
                               INVALID, None, "enum")

    def test_table_covers_every_request_field(self):
        """Every field of every request message (sub-messages included) has a table entry with
        its bad values or the reason it has none; no entry is stale; exceptions say why."""
        seen, problems = set(), []
        for _, method in methods():
            for path in field_paths(method.input_type):
                field = path[-1]
                key = (field.containing_type.full_name, field.name)
                if key in seen:
                    continue  # a message used by several requests (KnnLm, Recall)
                seen.add(key)
                spec = self.table.get(key[0], {}).get(key[1])
                if spec is None:
                    problems.append(f"{key[0]}.{key[1]} ({method.name}: {dotted(path)}) has no "
                                    "table entry: add its bad values or why it has none")
                    continue
                kinds = {c.kind for c in spec.cases}
                numeric = field.type in _NUMERIC_TYPES or field.type == FD.TYPE_BOOL
                if numeric and not is_map(field) and "range" not in kinds and not spec.no_range:
                    problems.append(f"{key[0]}.{key[1]}: no out-of-range cases and no reason")
                sized = (field.type in (FD.TYPE_STRING, FD.TYPE_BYTES) or is_repeated(field))
                if sized and "oversize" not in kinds and not spec.no_oversize:
                    problems.append(f"{key[0]}.{key[1]}: no oversize cases and no reason")
                for case in spec.cases:
                    if case.code != INVALID and not case.why:
                        problems.append(f"{key[0]}.{key[1]}: {case.code.name} without a why")
        for message, fields in self.table.items():
            for name in fields:
                if (message, name) not in seen:
                    problems.append(f"{message}.{name}: stale table entry (no such field)")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_sweep(self):
        start = time.monotonic()
        failures, counts = [], {}
        messages_seen, fields_seen = set(), set()
        for service, method, name, label, messages, code, mentions, kind in self.sweep_cases():
            messages_seen.add(method.input_type.full_name)
            fields_seen.add((method.name, name))
            counts[kind] = counts.get(kind, 0) + 1
            got, details = self.call(service, method, messages)
            ok = got == code and (names_field(details, name) if mentions is None
                                  else mentions in details)
            if not ok:
                expected = f"{code.name} " + (f"naming {name}" if mentions is None
                                              else f"mentioning {mentions!r}")
                failures.append(f"{method.name} {name} [{label}]: got {got.name} "
                                f"{details[:160]!r}, expected {expected}")
            if self.server.proc.poll() is not None:
                self.fail(f"mnemo-server died at {method.name} {name} [{label}]:\n"
                          f"{self.server.log_tail()}")
        # Session ids never reached a file outside --session_dir.
        outside = sorted(f for f in os.listdir(os.path.dirname(self.canary))
                         if f.startswith(CANARY))
        if outside != [CANARY + ".snap"]:
            failures.append(f"a session id like ../{CANARY} reached a file outside "
                            f"--session_dir: {outside} instead of ['{CANARY}.snap']")
        total = sum(counts.values())
        print(f"\nbad input sweep: {len(messages_seen)} request messages, {len(fields_seen)} "
              f"(method, field) paths, {total} cases {counts}, {len(failures)} failed, "
              f"{time.monotonic() - start:.1f}s", file=sys.stderr)
        # The server is still up and serves a normal request.
        self.assertIsNone(self.server.proc.poll(), self.server.log_tail())
        stream = self.client.generate("still up", max_new_tokens=4, stop_at_eos=False)
        stream.text()
        self.assertEqual(stream.usage.generated_tokens, 4)
        self.assertEqual(failures, [], f"{len(failures)} of {total} bad inputs were not "
                         "answered as documented:\n" + "\n".join(failures))

    def test_request_over_max_request_bytes(self):
        """Strings and repeated fields have no per-field cap: the whole request has one
        (--max_request_bytes), enforced by gRPC before any field is parsed."""
        service = _stubs.generation_pb2.DESCRIPTOR.services_by_name["Generation"]
        method = service.methods_by_name["Score"]
        request = _stubs.generation_pb2.ScoreRequest(text="x" * (MAX_REQUEST_BYTES + 1024))
        code, details = self.call(service, method, [request.SerializeToString()])
        self.assertEqual(code, RESOURCE_EXHAUSTED, details)
        stream = self.client.generate("still up", max_new_tokens=2, stop_at_eos=False)
        stream.text()
        self.assertEqual(stream.usage.generated_tokens, 2)


if __name__ == "__main__":
    unittest.main()
