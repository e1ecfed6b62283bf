// Helpers shared by the communication tests: options with short deadlines,
// typed element access to raw byte buffers (so one test body covers every
// dtype), and the world's rank and size. Tests run under mpirun with 1 to 4
// ranks; every rank runs the same tests in the same order (GoogleTest's
// order is deterministic), which the collectives inside them rely on.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "host/comm/low_precision.h"
#include "host/comm/types.h"

namespace accel::comm::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Deadlines short enough that a broken test fails in seconds, long enough
// for 4 ranks sharing 2 cores. Failures are reported, never fatal here.
inline CommOptions test_options(int64_t timeout_ms = 20000) {
  CommOptions o;
  o.timeout_ms = timeout_ms;
  o.abort_on_failure = false;
  o.watchdog_period_ms = 50;
  return o;
}

// A byte buffer of `count` elements of `dtype`.
struct TypedBuffer {
  DType dtype;
  std::vector<uint8_t> bytes;

  TypedBuffer(DType d, int64_t count) : dtype(d), bytes(static_cast<size_t>(count) * dtype_size(d), 0) {}
  int64_t count() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  Buffer view() { return host_buffer(bytes.empty() ? nullptr : bytes.data(), count(), dtype); }
  Buffer view(int64_t offset, int64_t n) {
    return host_buffer(bytes.data() + static_cast<size_t>(offset) * dtype_size(dtype), n, dtype);
  }

  // Stores `v` rounded to the dtype the way the backend rounds.
  void set(int64_t i, double v) {
    uint8_t* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        store(p, static_cast<float>(v));
        break;
      case DType::f64:
        store(p, v);
        break;
      case DType::i8:
        store(p, static_cast<int8_t>(v));
        break;
      case DType::u8:
        store(p, static_cast<uint8_t>(v));
        break;
      case DType::i32:
        store(p, static_cast<int32_t>(v));
        break;
      case DType::i64:
        store(p, static_cast<int64_t>(v));
        break;
      case DType::f16:
        store(p, lowp::float_to_f16(static_cast<float>(v)));
        break;
      case DType::bf16:
        store(p, lowp::float_to_bf16(static_cast<float>(v)));
        break;
      case DType::f8_e4m3:
        store(p, lowp::float_to_e4m3(static_cast<float>(v)));
        break;
      case DType::f8_e5m2:
        store(p, lowp::float_to_e5m2(static_cast<float>(v)));
        break;
    }
  }

  double get(int64_t i) const {
    const uint8_t* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        return load<float>(p);
      case DType::f64:
        return load<double>(p);
      case DType::i8:
        return load<int8_t>(p);
      case DType::u8:
        return load<uint8_t>(p);
      case DType::i32:
        return load<int32_t>(p);
      case DType::i64:
        return static_cast<double>(load<int64_t>(p));
      case DType::f16:
        return lowp::f16_to_float(load<uint16_t>(p));
      case DType::bf16:
        return lowp::bf16_to_float(load<uint16_t>(p));
      case DType::f8_e4m3:
        return lowp::e4m3_to_float(load<uint8_t>(p));
      case DType::f8_e5m2:
        return lowp::e5m2_to_float(load<uint8_t>(p));
    }
    return 0;
  }

 private:
  template <class T>
  static void store(uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  template <class T>
  static T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

// Element i of rank r's input. Chosen so every partial sum over up to four
// ranks is exactly representable in every dtype (E5M2 included: at most 3
// significant bits), so reductions can be compared bit for bit whatever
// order MPI combines in: |value| = {0,1,2} x 2^{-2..2}, sums of <= 4 such
// values of one element have at most 3 significant bits.
inline double test_value(DType dtype, int rank, int64_t i) {
  const double base = static_cast<double>((i + 3 * rank + 1) % 3);
  if (dtype == DType::u8) return base;
  const double sign = (i % 2) ? -1.0 : 1.0;
  if (dtype_is_integer(dtype)) return base * sign;
  const double scale = static_cast<double>(1 << (i % 5)) / 4.0;
  return base * sign * scale;
}

}  // namespace accel::comm::testing
