// Background checkpoint writes (see async_checkpoint.h).
#include "host/train/async_checkpoint.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <utility>

namespace accel::train {

namespace {

// ACCEL_TEST_STAGING_DELAY_MS: a test's hook that starts every staging
// copy this late, so a test can show that the optimizer step waits for it
// (tests/python/test_async_checkpoint.py). Unset or unparsable: none.
int64_t test_staging_delay_ms() {
  const char* text = std::getenv("ACCEL_TEST_STAGING_DELAY_MS");
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && value > 0 ? value : 0;
}

}  // namespace

AsyncCheckpointWriter::~AsyncCheckpointWriter() { join(); }

void AsyncCheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(checkpoint::PreparedSave save) {
  if (in_flight()) throw std::logic_error("AsyncCheckpointWriter::start with a save in flight");
  save_ = std::make_unique<checkpoint::PreparedSave>(std::move(save));
  written_.store(false, std::memory_order_relaxed);
  {
    const std::lock_guard<std::mutex> lock(staged_mutex_);
    staged_ = false;
  }
  wait_reported_ = false;
  const int64_t delay_ms = test_staging_delay_ms();
  checkpoint::PreparedSave* writing = save_.get();
  thread_ = std::thread([this, writing, delay_ms] {
    const auto begin = std::chrono::steady_clock::now();
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    writing->stage();  // never throws, like write()
    {
      const std::lock_guard<std::mutex> lock(staged_mutex_);
      staged_ = true;
    }
    staged_changed_.notify_all();
    writing->write();  // never throws: a failure is its outcome in the commit
    write_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    written_.store(true, std::memory_order_release);
  });
}

std::optional<double> AsyncCheckpointWriter::wait_staged() {
  if (wait_reported_) return std::nullopt;
  wait_reported_ = true;
  const auto begin = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(staged_mutex_);
  staged_changed_.wait(lock, [this] { return staged_; });
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

std::filesystem::path AsyncCheckpointWriter::commit() {
  if (!in_flight()) throw std::logic_error("AsyncCheckpointWriter::commit with no save in flight");
  join();
  wait_reported_ = true;  // staged with the write: no later step waits for it
  std::unique_ptr<checkpoint::PreparedSave> save = std::move(save_);
  last_write_ms_ = write_ms_;
  last_host_bytes_ = save->host_bytes();
  std::filesystem::path committed = save->finish();
  spent_ = std::move(save);  // its buffers serve the next save
  return committed;
}

}  // namespace accel::train
