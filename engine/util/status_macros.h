// MNEMO_RETURN_IF_ERROR / MNEMO_ASSIGN_OR_RETURN: Debian's Abseil ships no status macros.
#ifndef MNEMO_ENGINE_UTIL_STATUS_MACROS_H_
#define MNEMO_ENGINE_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MNEMO_CONCAT_INNER_(a, b) a##b
#define MNEMO_CONCAT_(a, b) MNEMO_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define MNEMO_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status mnemo_status_ = (expr);           \
    if (!mnemo_status_.ok()) return mnemo_status_;   \
  } while (0)

// MNEMO_ASSIGN_OR_RETURN(auto x, F()): declares/assigns x from a StatusOr, or returns its status.
#define MNEMO_ASSIGN_OR_RETURN(lhs, expr) \
  MNEMO_ASSIGN_OR_RETURN_IMPL_(MNEMO_CONCAT_(mnemo_statusor_, __LINE__), lhs, expr)

#define MNEMO_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return statusor.status();           \
  lhs = std::move(statusor).value()

#endif  // MNEMO_ENGINE_UTIL_STATUS_MACROS_H_
