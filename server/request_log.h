// RequestLog: one line per finished RPC (--log_format text|json|off), for operators:
// time, method, tenant, session, status code (and its message when not OK), tokens in and
// out, queue and total time, and the peer. The prompt text only with --log_prompts.
//
// Lines go to one FILE (stderr in the server) with a single write each, so lines from
// concurrent calls never interleave. JSON lines are one object each (jq-friendly); text lines
// are `key=value` pairs after the time and method, values quoted when they hold spaces.
// Thread-safety: Write may be called from any thread.
#ifndef MNEMO_SERVER_REQUEST_LOG_H_
#define MNEMO_SERVER_REQUEST_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mnemo::server {

struct RequestRecord {
  absl::Time start;
  std::string method;
  std::string tenant;   // "" without --auth_keys
  std::string session;  // the client's id; "" for one-shot calls
  std::string peer;
  absl::Status status;
  int64_t tokens_in = 0;
  int64_t tokens_out = 0;
  std::optional<absl::Duration> queue_time;
  absl::Duration total_time;
  std::optional<std::string> prompt;  // set only when prompts are logged
};

class RequestLog {
 public:
  enum class Format { kOff, kText, kJson };
  // "off", "text" or "json"; INVALID_ARGUMENT otherwise.
  static absl::StatusOr<Format> ParseFormat(absl::string_view name);

  RequestLog(Format format, bool log_prompts, std::FILE* out)
      : format_(format), log_prompts_(log_prompts), out_(out) {}

  bool enabled() const { return format_ != Format::kOff; }
  bool log_prompts() const { return enabled() && log_prompts_; }

  // The line for `record` (with its newline); "" when off.
  std::string Line(const RequestRecord& record) const;
  void Write(const RequestRecord& record);

 private:
  const Format format_;
  const bool log_prompts_;
  std::FILE* const out_;
  absl::Mutex mu_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_REQUEST_LOG_H_
