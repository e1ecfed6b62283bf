// Small, portable, counter-based randomness for everything that must be
// reproducible across runs, machines and world sizes (data order, synthetic
// data). std::shuffle and std::uniform_int_distribution are avoided on
// purpose: their algorithms differ between standard libraries.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace accel {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stream of 64-bit values: splitmix64 of (key, counter).
class CounterRng {
 public:
  explicit CounterRng(uint64_t key) : key_(key) {}
  uint64_t next() { return splitmix64(key_ ^ splitmix64(counter_++)); }
  // Uniform in [0, bound), without modulo bias (Lemire's rejection).
  uint64_t below(uint64_t bound) {
    for (;;) {
      const unsigned __int128 product = static_cast<unsigned __int128>(next()) * bound;
      const uint64_t low = static_cast<uint64_t>(product);
      if (low >= (-bound) % bound) return static_cast<uint64_t>(product >> 64);
    }
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// Fisher-Yates with CounterRng: the same permutation everywhere.
template <typename T>
void shuffle(std::vector<T>& values, CounterRng& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace accel
