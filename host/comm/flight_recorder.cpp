// The flight recorder's ring (see flight_recorder.h). Records are addressed
// by sequence number, so finishing one never searches: seq s lives in slot
// (s - 1) % capacity, and a slot whose seq differs was overwritten.
#include "host/comm/flight_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "host/util/strformat.h"

namespace accel::comm {

const char* op_name(OpType op) {
  switch (op) {
    case OpType::all_reduce:
      return "all_reduce";
    case OpType::all_gather:
      return "all_gather";
    case OpType::reduce_scatter:
      return "reduce_scatter";
    case OpType::broadcast:
      return "broadcast";
    case OpType::all_to_all:
      return "all_to_all";
    case OpType::send:
      return "send";
    case OpType::recv:
      return "recv";
    case OpType::batch_p2p:
      return "batch_p2p";
    case OpType::barrier:
      return "barrier";
    case OpType::all_to_all_v:
      return "all_to_all_v";
  }
  return "invalid";
}

const char* op_state_name(OpState state) {
  switch (state) {
    case OpState::issued:
      return "PENDING";
    case OpState::completed:
      return "completed";
    case OpState::failed:
      return "FAILED";
    case OpState::timed_out:
      return "TIMED_OUT";
  }
  return "invalid";
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity) { ring_.resize(capacity_); }

int64_t FlightRecorder::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FlightRecorder::record_issue(OpRecord record) {
  if (capacity_ == 0 || record.seq == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  ring_[(record.seq - 1) % capacity_] = std::move(record);
  ++total_;
}

void FlightRecorder::record_finish(uint64_t seq, OpState state) {
  if (capacity_ == 0 || seq == 0) return;
  const int64_t now = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  OpRecord& slot = ring_[(seq - 1) % capacity_];
  if (slot.seq != seq || slot.state != OpState::issued) return;
  slot.state = state;
  slot.finished_us = now;
}

std::vector<OpRecord> FlightRecorder::snapshot(size_t last_n) const {
  std::vector<OpRecord> out;
  if (capacity_ == 0) return out;
  std::lock_guard<std::mutex> lock(mu_);
  // Collect the live slots, then order by seq (issue order).
  for (const OpRecord& r : ring_) {
    if (r.seq != 0) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) { return a.seq < b.seq; });
  if (last_n != 0 && out.size() > last_n) out.erase(out.begin(), out.end() - static_cast<long>(last_n));
  return out;
}

uint64_t FlightRecorder::total_recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

std::string format_record(const OpRecord& r) {
  std::string peer = r.peer >= 0 ? std::to_string(r.peer) : std::string("-");
  std::string timing;
  if (r.finished_us != 0) {
    timing = strformat(" after %.3f ms", static_cast<double>(r.finished_us - r.issued_us) / 1000.0);
  } else {
    timing = strformat(" for %.3f ms", static_cast<double>(FlightRecorder::now_us() - r.issued_us) / 1000.0);
  }
  return strformat("seq=%llu %s %s x%lld peer=%s label='%s' issued_us=%lld %s%s",
                   static_cast<unsigned long long>(r.seq), op_name(r.op), dtype_name(r.dtype),
                   static_cast<long long>(r.count), peer.c_str(), r.label.c_str(),
                   static_cast<long long>(r.issued_us), op_state_name(r.state), timing.c_str());
}

std::string FlightRecorder::dump(const std::string& header, size_t last_n) const {
  const std::vector<OpRecord> records = snapshot(last_n);
  std::string out = header;
  out += strformat(" (%zu of %llu operations, oldest first)\n", records.size(),
                   static_cast<unsigned long long>(total_recorded()));
  for (const OpRecord& r : records) {
    out += "  ";
    out += format_record(r);
    out += '\n';
  }
  return out;
}

bool FlightRecorder::dump_to_file(const std::string& path, const std::string& header,
                                  std::string* error) const {
  // Written to a temporary name first: a reader (or a second dump) never sees
  // half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::trunc);
    if (!file) {
      if (error) *error = "cannot open " + tmp;
      return false;
    }
    file << dump(header);
    file.flush();
    if (!file) {
      if (error) *error = "cannot write " + tmp;
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (error) *error = "cannot rename " + tmp + " to " + path;
    return false;
  }
  return true;
}

}  // namespace accel::comm
