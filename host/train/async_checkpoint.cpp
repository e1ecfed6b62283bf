// Background checkpoint writes (see async_checkpoint.h).
#include "host/train/async_checkpoint.h"

#include <chrono>
#include <stdexcept>
#include <utility>

namespace accel::train {

AsyncCheckpointWriter::~AsyncCheckpointWriter() { join(); }

void AsyncCheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(checkpoint::PreparedSave save) {
  if (in_flight()) throw std::logic_error("AsyncCheckpointWriter::start with a save in flight");
  save_ = std::make_unique<checkpoint::PreparedSave>(std::move(save));
  written_.store(false, std::memory_order_relaxed);
  checkpoint::PreparedSave* writing = save_.get();
  thread_ = std::thread([this, writing] {
    const auto begin = std::chrono::steady_clock::now();
    writing->write();  // never throws: a failure is its outcome in the commit
    write_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    written_.store(true, std::memory_order_release);
  });
}

std::filesystem::path AsyncCheckpointWriter::commit() {
  if (!in_flight()) throw std::logic_error("AsyncCheckpointWriter::commit with no save in flight");
  join();
  std::unique_ptr<checkpoint::PreparedSave> save = std::move(save_);
  last_write_ms_ = write_ms_;
  last_host_bytes_ = save->host_bytes();
  std::filesystem::path committed = save->finish();
  spent_ = std::move(save);  // its buffers serve the next save
  return committed;
}

}  // namespace accel::train
