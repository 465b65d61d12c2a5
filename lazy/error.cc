#include "lazy/error.h"

#include "absl/strings/str_cat.h"
#include "ir/graph_signature.h"

namespace lazyrt {

std::string FormatLocation(const std::source_location& where) { return ir::LocationText(where); }

Error::Error(std::string message, std::source_location where)
    : std::runtime_error(absl::StrCat("lazyrt: ", message, " (at ", FormatLocation(where), ")")),
      location_(FormatLocation(where)) {}

Error::Error(std::string message) : std::runtime_error(absl::StrCat("lazyrt: ", message)) {}

void ThrowIfError(const absl::Status& status, absl::string_view what, const std::source_location& where) {
  if (status.ok()) return;
  throw Error(absl::StrCat(what, ": ", status.message()), where);
}

}  // namespace lazyrt
