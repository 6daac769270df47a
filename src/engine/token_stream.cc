#include "engine/token_stream.h"

namespace tessera::engine {

void RequestStream::push(TokenEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = event.last();
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
  if (notify_) notify_();
}

std::optional<TokenEvent> RequestStream::try_next() {
  std::lock_guard lock(mutex_);
  if (events_.empty()) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

TokenEvent RequestStream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty(); });
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<TokenEvent> RequestStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::vector<TokenEvent> RequestStream::drain() {
  std::lock_guard lock(mutex_);
  std::vector<TokenEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

}  // namespace tessera::engine
