#include "pjrt_sim/event.h"

namespace lazyrt::pjrt {

std::shared_ptr<Event> Event::Ready(absl::Status status) {
  auto event = std::make_shared<Event>();
  event->Set(std::move(status));
  return event;
}

void Event::Set(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_) return;
    ready_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

absl::Status Event::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ready_; });
  return status_;
}

bool Event::IsReady() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

}  // namespace lazyrt::pjrt
