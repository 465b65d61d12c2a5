// The error thrown at the public tensor API: what was wrong, with the shapes involved and the user's
// source location.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace lazyrt {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::source_location where);
  explicit Error(std::string message);
  // The user's file and line the error was raised for ("train.cc:42"), or empty.
  const std::string& location() const { return location_; }

 private:
  std::string location_;
};

// "examples/train_mlp.cpp:42" (ir::LocationText).
std::string FormatLocation(const std::source_location& where);

// Throws Error("<what>: <status message> (at file:line)") unless `status` is ok.
void ThrowIfError(const absl::Status& status, absl::string_view what, const std::source_location& where);

}  // namespace lazyrt
