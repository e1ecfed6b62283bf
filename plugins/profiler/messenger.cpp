// Point-to-point messages over the comm services (see messenger.h).
#include "messenger.h"

namespace accel::profiler {

void Messenger::transfer(bool sending, int32_t peer, void* data, int64_t count, DLDataType dtype) const {
  if (count == 0) return;
  const accel::sdk::FlatView view(data, count, dtype);
  AccelCollectiveArgs args{};
  args.struct_size = sizeof(args);
  args.group = nullptr;  // world
  args.input = sending ? view.get() : nullptr;
  args.output = sending ? nullptr : view.get();
  args.peer = peer;
  args.timeout_ms = timeout_ms_;
  args.label = "profiler clock and trace exchange";
  const AccelCommServices& comm = *services_.table()->comm;
  services_.check((sending ? comm.send : comm.recv)(services_.host(), &args, nullptr),
                  sending ? "profiler send" : "profiler recv");
}

void Messenger::send(int32_t peer, const std::vector<int64_t>& values) const {
  std::vector<int64_t> copy = values;
  transfer(true, peer, copy.data(), static_cast<int64_t>(copy.size()), DLDataType{kDLInt, 64, 1});
}

std::vector<int64_t> Messenger::recv(int32_t peer, size_t count) const {
  std::vector<int64_t> values(count);
  transfer(false, peer, values.data(), static_cast<int64_t>(count), DLDataType{kDLInt, 64, 1});
  return values;
}

void Messenger::send_text(int32_t peer, const std::string& text) const {
  send(peer, {static_cast<int64_t>(text.size())});
  std::string copy = text;
  transfer(true, peer, copy.data(), static_cast<int64_t>(copy.size()), DLDataType{kDLUInt, 8, 1});
}

std::string Messenger::recv_text(int32_t peer) const {
  const int64_t size = recv(peer, 1).at(0);
  std::string text(static_cast<size_t>(size), '\0');
  transfer(false, peer, text.data(), size, DLDataType{kDLUInt, 8, 1});
  return text;
}

}  // namespace accel::profiler
