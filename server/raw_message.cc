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

// Walks the wire encoding of a `type` message and returns the dotted name of the first string
// field that holds invalid UTF-8, or "" when there is none (or the bytes do not parse).
std::string FindInvalidUtf8Field(std::string_view data, const Descriptor* type, int depth = 0) {
  if (depth > 16) return "";
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const uint8_t*>(data.data()),
                                               static_cast<int>(data.size()));
  while (uint32_t tag = input.ReadTag()) {
    const FieldDescriptor* field = type->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == nullptr || !delimited) {
      if (!WireFormatLite::SkipField(&input, tag)) return "";
      continue;
    }
    uint32_t length = 0;
    if (!input.ReadVarint32(&length)) return "";
    const int start = input.CurrentPosition();
    if (length > data.size() - start || !input.Skip(static_cast<int>(length))) return "";
    const std::string_view value = data.substr(start, length);
    if (field->type() == FieldDescriptor::TYPE_STRING && !tokenizer::IsValidUtf8(value)) {
      return field->name();
    }
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      std::string inner = FindInvalidUtf8Field(value, field->message_type(), depth + 1);
      if (!inner.empty()) return absl::StrCat(field->name(), ".", inner);
    }
  }
  return "";
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out) {
  const std::string data = Flatten(bytes);
  // Checked before parsing (a linear scan, like protobuf's own check) so that a bad request
  // is named precisely and does not make protobuf log an error per request.
  const std::string field = FindInvalidUtf8Field(data, out->GetDescriptor());
  if (!field.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is not valid UTF-8"));
  if (out->ParseFromString(data)) return absl::OkStatus();
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

engine::Engine* BeginRawUnary(ServerState& state, absl::string_view rpc,
                              grpc::ServerUnaryReactor* reactor, const grpc::ByteBuffer& bytes,
                              google::protobuf::Message* request) {
  absl::StatusOr<engine::Engine*> engine = state.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state, rpc, /*admitted=*/false, reactor, engine.status());
    return nullptr;
  }
  if (absl::Status parsed = ParseRequest(bytes, request); !parsed.ok()) {
    FinishUnary(state, rpc, /*admitted=*/true, reactor, parsed);
    return nullptr;
  }
  return *engine;
}

}  // namespace mnemo::server
