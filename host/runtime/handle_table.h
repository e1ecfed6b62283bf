// Generation-tagged handle tables: what the host hands a plugin as an opaque
// AccelGroup* or AccelWork* is a number, never the address of a host object,
// so a bogus, stale (destroyed / freed) or wrong-kind handle is refused with
// a message instead of being dereferenced.
//
// A handle packs three fields into a pointer-sized value:
//     bits 56..63  the table's kind tag (groups and works differ, so a work
//                  handle passed as a group is "not a group handle")
//     bits 24..55  the slot's generation, bumped each time the slot is freed
//     bits  0..23  the slot index
// The tag is non-zero, so no handle is NULL, and a handle is a non-canonical
// address on x86-64 and AArch64: code that dereferences one faults at once
// instead of reading host memory. A slot's generation starts at 1 and only
// grows, so a freed handle stays refused until its slot has been reused
// 2^32 times.
//
// Thread-safety: every member is internally locked (work handles are tested
// and waited from any thread); entries are shared_ptr so a lookup keeps its
// object alive while the caller uses it, even if another thread frees the
// handle meanwhile.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace accel::runtime {

// Why a lookup failed; kOk when it did not.
enum class HandleProblem { kOk, kNull, kForeign, kStale };

template <class T>
class HandleTable {
 public:
  static constexpr int kIndexBits = 24;
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  static constexpr uint64_t kGenerationMask = 0xffffffffu;

  // `tag`: the kind byte (non-zero), distinct per table kind.
  explicit HandleTable(uint8_t tag) : tag_(tag) {}

  // Stores `object` and returns its handle (never 0). Throws
  // std::length_error once 2^24 handles are live at once.
  uint64_t add(std::shared_ptr<T> object) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (slots_.size() > kIndexMask) throw std::length_error("more than 2^24 live handles");
      index = static_cast<uint32_t>(slots_.size());
      slots_.push_back(Slot{});
    }
    slots_[index].object = std::move(object);
    ++live_;
    return encode(index, slots_[index].generation);
  }

  // The object behind `handle`, or nullptr with *problem saying why.
  std::shared_ptr<T> find(uint64_t handle, HandleProblem* problem) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const Slot* slot = locate(handle, problem);
    return slot ? slot->object : nullptr;
  }

  // Frees the slot (bumping its generation) and returns the object it held,
  // or nullptr with *problem set (the table is unchanged then).
  std::shared_ptr<T> remove(uint64_t handle, HandleProblem* problem) {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot* slot = const_cast<Slot*>(locate(handle, problem));
    if (!slot) return nullptr;
    std::shared_ptr<T> object = std::move(slot->object);
    slot->object.reset();
    slot->generation = (slot->generation + 1) & kGenerationMask;
    if (slot->generation == 0) slot->generation = 1;
    free_.push_back(static_cast<uint32_t>(handle & kIndexMask));
    --live_;
    return object;
  }

  size_t live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }

  // Every live object, in slot order (teardown, and per-group step checks).
  std::vector<std::shared_ptr<T>> objects() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    for (const Slot& s : slots_) {
      if (s.object) out.push_back(s.object);
    }
    return out;
  }

  uint8_t tag() const { return tag_; }

 private:
  struct Slot {
    std::shared_ptr<T> object;
    uint64_t generation = 1;
  };

  uint64_t encode(uint32_t index, uint64_t generation) const {
    return (uint64_t{tag_} << 56) | ((generation & kGenerationMask) << kIndexBits) | index;
  }

  const Slot* locate(uint64_t handle, HandleProblem* problem) const {
    HandleProblem found = HandleProblem::kOk;
    const Slot* slot = nullptr;
    const uint64_t index = handle & kIndexMask;
    if (handle == 0) {
      found = HandleProblem::kNull;
    } else if ((handle >> 56) != tag_ || index >= slots_.size()) {
      found = HandleProblem::kForeign;
    } else if (((handle >> kIndexBits) & kGenerationMask) != slots_[index].generation || !slots_[index].object) {
      found = HandleProblem::kStale;
    } else {
      slot = &slots_[index];
    }
    if (problem) *problem = found;
    return slot;
  }

  const uint8_t tag_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
};

// "is not a group handle from this host (0x...)" / "was destroyed" words for
// `what` ("group", "work") and `verb_gone` ("destroyed", "freed").
inline std::string describe_handle_problem(HandleProblem problem, const char* what, const char* verb_gone,
                                           uint64_t handle) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(handle));
  switch (problem) {
    case HandleProblem::kNull:
      return std::string(what) + " handle is NULL";
    case HandleProblem::kStale:
      return std::string(what) + " handle " + hex + " is stale: its " + what + " was " + verb_gone +
             " (a handle must not be used after that)";
    case HandleProblem::kForeign:
    default:
      return std::string(what) + " handle " + hex + " is not a " + what + " handle this host issued";
  }
}

}  // namespace accel::runtime
