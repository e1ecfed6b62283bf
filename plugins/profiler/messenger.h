// Point-to-point messages between ranks of the world group through the
// host's comm services (comm->send / comm->recv, synchronous): what the
// clock alignment's ping-pong and the merged trace's gathering travel on.
// Every call has a deadline, so a peer that never answers fails the call
// (an sdk::Error) instead of hanging the run's end.
//
// Thread-safety: loop thread only (the comm services' rule).
#pragma once

#include <accel/sdk/sdk.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace accel::profiler {

class Messenger {
 public:
  Messenger(const accel::sdk::Services& services, int64_t timeout_ms)
      : services_(services), timeout_ms_(timeout_ms) {}

  void send(int32_t peer, const std::vector<int64_t>& values) const;
  std::vector<int64_t> recv(int32_t peer, size_t count) const;
  // A byte string of any length (its length travels first).
  void send_text(int32_t peer, const std::string& text) const;
  std::string recv_text(int32_t peer) const;

 private:
  void transfer(bool sending, int32_t peer, void* data, int64_t count, DLDataType dtype) const;

  const accel::sdk::Services& services_;
  const int64_t timeout_ms_;
};

}  // namespace accel::profiler
