// A one-shot completion signal carrying a status: how a buffer says it is ready (or failed).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "absl/status/status.h"

namespace lazyrt::pjrt {

class Event {
 public:
  // An event that is already complete with `status`.
  static std::shared_ptr<Event> Ready(absl::Status status = absl::OkStatus());

  // Completes the event; the first call wins.
  void Set(absl::Status status);
  // Blocks until complete; returns the status it completed with.
  absl::Status Wait() const;
  bool IsReady() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool ready_ = false;
  absl::Status status_;
};

}  // namespace lazyrt::pjrt
