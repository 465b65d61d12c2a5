// RETURN_IF_ERROR / ASSIGN_OR_RETURN: the status plumbing every layer above the device writes, once.
// Header-only and absl-only, so lowering/, lazy/, tools/ and the tests use it without reaching into the
// device's implementation.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LAZYRT_STATUS_CONCAT_INNER(a, b) a##b
#define LAZYRT_STATUS_CONCAT(a, b) LAZYRT_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` (an absl::Status or absl::StatusOr) from the enclosing function when it
// is not OK.
#define RETURN_IF_ERROR(expr)                                                                      \
  do {                                                                                             \
    if (auto lazyrt_status_ = ::lazyrt::status_internal::AsStatus((expr)); !lazyrt_status_.ok()) { \
      return lazyrt_status_;                                                                       \
    }                                                                                              \
  } while (false)

// `lhs = value of expr`, or returns its status from the enclosing function. `lhs` may declare a
// variable: ASSIGN_OR_RETURN(auto module, Lower(graph));
#define ASSIGN_OR_RETURN(lhs, expr) \
  LAZYRT_ASSIGN_OR_RETURN_IMPL(LAZYRT_STATUS_CONCAT(lazyrt_statusor_, __LINE__), lhs, expr)
#define LAZYRT_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

namespace lazyrt::status_internal {
inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace lazyrt::status_internal
