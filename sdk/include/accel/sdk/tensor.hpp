// accel/sdk/tensor.hpp — DLTensor helpers and an owning accounted buffer.
//
// Tensors cross the ABI as borrowed DLTensor views (accel/tensor.h): these
// helpers check a view's dtype and place before touching its memory, read a
// scalar wherever it lives (a device scalar is copied to the host through
// memory->copy and its stream synchronised), and describe a view for
// messages. Buffer owns one memory->allocate allocation and frees it when it
// goes out of scope, or hands it on with release() where a field says
// "ownership passes to the host" (replacement_buffer, output_buffer).
// Every failure throws accel::sdk::Error. Thread-safety: as the memory
// services (any thread); a Buffer itself is not shared between threads.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accel/sdk/error.hpp"
#include "accel/sdk/services.hpp"

namespace accel::sdk {

// ------------------------------------------------------------------- dtypes

// The DLPack dtype of a C++ element type.
template <typename T>
constexpr DLDataType dtype_of() {
  static_assert(std::is_arithmetic_v<T>, "no DLPack dtype for this type");
  unsigned code = kDLUInt;
  if (std::is_same_v<T, bool>) {
    code = ACCEL_DL_BOOL;
  } else if (std::is_floating_point_v<T>) {
    code = kDLFloat;
  } else if (std::is_signed_v<T>) {
    code = kDLInt;
  }
  DLDataType t{};
  t.code = static_cast<uint8_t>(code);
  t.bits = static_cast<uint8_t>(8 * sizeof(T));
  t.lanes = 1;
  return t;
}

// "float32", "bfloat16", "float8_e4m3fn", ... for messages.
inline std::string dtype_name(DLDataType t) {
  const unsigned bits = t.bits;
  switch (t.code) {
    case kDLFloat: return format("float%u", bits);
    case kDLInt: return format("int%u", bits);
    case kDLUInt: return format("uint%u", bits);
    case kDLBfloat: return format("bfloat%u", bits);
    case ACCEL_DL_BOOL: return "bool";
    case ACCEL_DL_FLOAT8_E4M3FN: return "float8_e4m3fn";
    case ACCEL_DL_FLOAT8_E5M2: return "float8_e5m2";
    default: return format("dtype(code=%u, bits=%u)", unsigned{t.code}, bits);
  }
}

// ------------------------------------------------------------------- views

// True when the view's memory is directly addressable by the CPU.
inline bool is_host(const DLTensor& t) {
  return t.device.device_type == kDLCPU ||
         t.device.device_type == kDLCUDAHost;
}

// "float32[4, 64] on cuda:0", for messages.
inline std::string describe(const DLTensor& t) {
  std::string text = dtype_name(t.dtype) + "[";
  for (int32_t i = 0; i < t.ndim; ++i) {
    text += (i ? ", " : "") + std::to_string(t.shape[i]);
  }
  text += is_host(t) ? std::string("] on cpu")
                     : format("] on device %d:%d",
                              static_cast<int>(t.device.device_type),
                              static_cast<int>(t.device.device_id));
  return text;
}

// The first element of a host view, typed. Throws unless the view is host
// memory of element type T.
template <typename T>
T* data(const DLTensor& t) {
  if (!accel_dtype_equal(t.dtype, dtype_of<T>()) || !is_host(t)) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "expected " + dtype_name(dtype_of<T>()) +
                    " in host memory, got " + describe(t));
  }
  return static_cast<T*>(accel_tensor_begin(&t));
}

// The value of a one-element tensor of element type T, wherever it lives: a
// host view is read directly; a device view is copied to the host on
// `stream` (NULL: the compute stream), which is then synchronised.
template <typename T>
T read_scalar(const Services& services, const DLTensor& t,
              AccelStream stream = nullptr) {
  if (accel_tensor_numel(&t) != 1 ||
      !accel_dtype_equal(t.dtype, dtype_of<T>())) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "expected a one-element " + dtype_name(dtype_of<T>()) +
                    " tensor, got " + describe(t));
  }
  if (is_host(t)) return *data<T>(t);
  const AccelMemoryServices* memory = services.table()->memory;
  if (!has_fn(memory, &AccelMemoryServices::copy) ||
      !has_fn(memory, &AccelMemoryServices::stream_synchronize)) {
    throw Error(ACCEL_ERROR_UNSUPPORTED, "reading " + describe(t) +
                                             ": the host offers no copy");
  }
  T value{};
  std::vector<int64_t> strides(static_cast<size_t>(t.ndim), 1);
  DLTensor host_view{};
  host_view.data = &value;
  host_view.device.device_type = kDLCPU;
  host_view.ndim = t.ndim;
  host_view.dtype = dtype_of<T>();
  host_view.shape = t.shape;
  host_view.strides = strides.data();
  AccelCopyArgs copy{};
  copy.struct_size = sizeof(copy);
  copy.src = &t;
  copy.dst = &host_view;
  copy.stream = stream;
  services.check(memory->copy(services.host(), &copy), "read_scalar: copy");
  services.check(memory->stream_synchronize(services.host(), stream),
                 "read_scalar: synchronize");
  return value;
}

// ------------------------------------------------------------------ Buffer

// A 1-D view of elements [offset, offset + count) of a contiguous tensor (a
// unit's flat buffer, a bucket): the slices plugins hand to kernels and
// collectives. Owns its shape and stride; valid while `base`'s memory is.
class FlatView {
 public:
  FlatView(const DLTensor& base, int64_t offset, int64_t count) : shape_(count) {
    view_ = base;
    view_.ndim = 1;
    view_.shape = &shape_;
    view_.strides = &stride_;
    view_.byte_offset = base.byte_offset + static_cast<uint64_t>(offset) * ((base.dtype.bits + 7u) / 8u);
  }
  // A view of host memory the plugin owns (fp32 by default).
  FlatView(void* data, int64_t count, DLDataType dtype = {kDLFloat, 32, 1}) : shape_(count) {
    view_.data = data;
    view_.device = {kDLCPU, 0};
    view_.ndim = 1;
    view_.dtype = dtype;
    view_.shape = &shape_;
    view_.strides = &stride_;
  }
  FlatView(const FlatView&) = delete;
  FlatView& operator=(const FlatView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t shape_;
  int64_t stride_ = 1;
  DLTensor view_{};
};

// The transpose of a contiguous 2-D tensor as a strided view ([cols, rows],
// strides {1, cols}) of the same memory. Throws Error(INVALID_ARGUMENT) for
// any other tensor.
class TransposedView {
 public:
  explicit TransposedView(const DLTensor& base) {
    if (base.ndim != 2 || !accel_tensor_is_contiguous(&base)) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "TransposedView needs a contiguous 2-D tensor, got " + describe(base));
    }
    shape_[0] = base.shape[1];
    shape_[1] = base.shape[0];
    strides_[0] = 1;
    strides_[1] = base.shape[1];
    view_ = base;
    view_.shape = shape_;
    view_.strides = strides_;
  }
  TransposedView(const TransposedView&) = delete;
  TransposedView& operator=(const TransposedView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t shape_[2];
  int64_t strides_[2];
  DLTensor view_{};
};

// A 0-d fp32 host tensor over one float: scales, norms, scalar collectives.
class ScalarView {
 public:
  explicit ScalarView(float* value) noexcept {
    view_.data = value;
    view_.device = {kDLCPU, 0};
    view_.dtype = {kDLFloat, 32, 1};
    view_.shape = &unused_;
    view_.strides = &unused_;
  }
  ScalarView(const ScalarView&) = delete;
  ScalarView& operator=(const ScalarView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t unused_ = 0;
  DLTensor view_{};
};

// One accounted allocation (memory->allocate), freed on destruction after the
// work enqueued on its stream. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Services& services, AccelMemoryCategory category,
         DLDataType dtype, std::vector<int64_t> shape,
         AccelMemoryPlace place = ACCEL_MEMORY_DEVICE, uint32_t flags = 0,
         AccelStream stream = nullptr, const char* label = nullptr)
      : services_(services), stream_(stream) {
    const AccelMemoryServices* memory = services.table()->memory;
    if (!has_fn(memory, &AccelMemoryServices::allocate)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "the host offers no allocate");
    }
    AccelAllocateArgs args{};
    args.struct_size = sizeof(args);
    args.place = place;
    args.category = category;
    args.dtype = dtype;
    args.ndim = static_cast<int32_t>(shape.size());
    args.shape = shape.data();
    args.flags = flags;
    args.stream = stream;
    args.label = label;
    services.check(memory->allocate(services.host(), &args),
                   label != nullptr ? format("allocate %s", label)
                                    : std::string("allocate"));
    buffer_ = args.buffer;
    tensor_ = args.tensor;
  }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      services_ = other.services_;
      stream_ = other.stream_;
      buffer_ = other.buffer_;
      tensor_ = other.tensor_;
      other.buffer_ = nullptr;
      other.tensor_ = nullptr;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  explicit operator bool() const noexcept { return buffer_ != nullptr; }
  // The whole buffer as a compact row-major view; valid while it is owned.
  const DLTensor& tensor() const noexcept { return *tensor_; }
  // The same, or null when nothing is owned (binding tensor() to an empty
  // buffer is undefined behaviour even when the reference goes unused).
  const DLTensor* tensor_or_null() const noexcept { return tensor_; }
  AccelBuffer* get() const noexcept { return buffer_; }
  // Gives up ownership (to a field that passes it to the host).
  AccelBuffer* release() noexcept {
    AccelBuffer* b = buffer_;
    buffer_ = nullptr;
    tensor_ = nullptr;
    return b;
  }
  // Frees the buffer now (a failure is ignored: nothing to do about it here).
  void reset() noexcept {
    if (buffer_ == nullptr) return;
    const AccelMemoryServices* memory = services_.table()->memory;
    if (has_fn(memory, &AccelMemoryServices::deallocate))
      (void)memory->deallocate(services_.host(), buffer_, stream_);
    buffer_ = nullptr;
    tensor_ = nullptr;
  }

 private:
  Services services_{nullptr, nullptr};
  AccelStream stream_ = nullptr;
  AccelBuffer* buffer_ = nullptr;
  const DLTensor* tensor_ = nullptr;
};

}  // namespace accel::sdk
