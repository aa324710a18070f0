#include "server/raw_message.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace mnemo::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

std::string Flatten(const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  if (!bytes.Dump(&slices).ok()) return flat;
  flat.reserve(bytes.Length());
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return flat;
}

const char* WireTypeName(int wire) {
  switch (wire) {
    case WireFormatLite::WIRETYPE_VARINT: return "varint";
    case WireFormatLite::WIRETYPE_FIXED64: return "64-bit";
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: return "length-delimited";
    case WireFormatLite::WIRETYPE_START_GROUP: return "start group";
    case WireFormatLite::WIRETYPE_END_GROUP: return "end group";
    case WireFormatLite::WIRETYPE_FIXED32: return "32-bit";
    default: return "invalid";
  }
}

// Whether protobuf reads a value of `field` sent with wire type `wire`: the type's own wire
// type, or length-delimited (packed) for a repeated scalar. A value with any other wire type
// protobuf keeps as an unknown field, so the request would run as if the field were unset.
bool TakesWireType(const FieldDescriptor& field, int wire) {
  const int own = WireFormatLite::WireTypeForFieldType(
      static_cast<WireFormatLite::FieldType>(field.type()));
  return wire == own ||
         (field.is_packable() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// Walks the wire encoding of a `type` message (its field names prefixed with `prefix`) and
// returns INVALID_ARGUMENT naming the first dotted field that protobuf would misread: one sent
// with a wire type it does not take, or a string holding invalid UTF-8 (which protobuf refuses
// without naming it). OK when there is none. Sets `*malformed` (and returns OK) when the bytes
// do not parse at all: a value or length running past its message, a zero tag, a broken varint;
// ParseRequest then refuses them without handing them to protobuf, whose string reader would log
// a UTF-8 error before noticing the overrun. Field numbers the type does not have are skipped: a
// newer client's fields. Below 16 levels of nesting the walk stops and protobuf has the last word.
absl::Status CheckFields(std::string_view data, const Descriptor* type, bool* malformed,
                         absl::string_view prefix = "", int depth = 0) {
  if (depth > 16) return absl::OkStatus();
  const auto give_up = [malformed] {
    *malformed = true;
    return absl::OkStatus();
  };
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const uint8_t*>(data.data()),
                                               static_cast<int>(data.size()));
  while (uint32_t tag = input.ReadTag()) {
    const FieldDescriptor* field = type->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const int wire = WireFormatLite::GetTagWireType(tag);
    if (field != nullptr && !TakesWireType(*field, wire)) {
      const int own = WireFormatLite::WireTypeForFieldType(
          static_cast<WireFormatLite::FieldType>(field->type()));
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, field->name(), " has wire type ", wire, " (", WireTypeName(wire),
          "), but its type ", field->type_name(), " takes ", own, " (", WireTypeName(own), ")",
          field->is_packable() ? " or 2 (packed)" : ""));
    }
    const bool walk = field != nullptr && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
                      (field->type() == FieldDescriptor::TYPE_STRING ||
                       field->type() == FieldDescriptor::TYPE_MESSAGE);
    if (!walk) {
      if (!WireFormatLite::SkipField(&input, tag)) return give_up();
      continue;
    }
    uint32_t length = 0;
    if (!input.ReadVarint32(&length)) return give_up();
    const int start = input.CurrentPosition();
    if (length > data.size() - start || !input.Skip(static_cast<int>(length))) return give_up();
    const std::string_view value = data.substr(start, length);
    const std::string name = absl::StrCat(prefix, field->name());
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!tokenizer::IsValidUtf8(value)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " is not valid UTF-8"));
      }
      continue;
    }
    absl::Status inner =
        CheckFields(value, field->message_type(), malformed, absl::StrCat(name, "."), depth + 1);
    if (!inner.ok() || *malformed) return inner;
  }
  // ReadTag answers 0 at the end of the bytes, and for a zero tag (never valid) before it.
  if (input.CurrentPosition() != static_cast<int>(data.size())) return give_up();
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out) {
  // No message at all (an empty one is a valid, zero-length buffer): the client reset the call
  // or its deadline passed before the request arrived, since a live client of a unary or
  // server-streaming method always sends one. Nothing may run on it (a CreateSession would make
  // a session nobody knows).
  if (!bytes.Valid()) {
    return absl::CancelledError(absl::StrCat(
        "no ", out->GetDescriptor()->name(), " arrived: the call ended before its request"));
  }
  const std::string data = Flatten(bytes);
  // Checked before parsing (a linear scan, like protobuf's own UTF-8 check) so that a bad
  // request is named precisely: protobuf would refuse invalid UTF-8 without naming the field
  // (logging an error per request) and would drop a value sent with the wrong wire type.
  bool malformed = false;
  if (absl::Status fields = CheckFields(data, out->GetDescriptor(), &malformed); !fields.ok()) {
    return fields;
  }
  if (!malformed && out->ParseFromString(data)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", out->GetDescriptor()->full_name()));
}

void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  out->Clear();
  // Cannot fail for a message we built (its strings are valid UTF-8 by construction).
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own_buffer)
      .IgnoreError();
}

std::shared_ptr<Call> BeginRawUnary(ServerState& state, grpc::CallbackServerContext* context,
                                    absl::string_view rpc, grpc::ServerUnaryReactor* reactor,
                                    const grpc::ByteBuffer& bytes,
                                    google::protobuf::Message* request) {
  std::shared_ptr<Call> call = Call::Begin(state, context, rpc);
  if (!call->ok()) {
    call->FinishUnary(reactor, call->status());
    return nullptr;
  }
  if (absl::Status parsed = ParseRequest(bytes, request); !parsed.ok()) {
    call->FinishUnary(reactor, parsed);
    return nullptr;
  }
  return call;
}

}  // namespace mnemo::server
