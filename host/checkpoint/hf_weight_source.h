// --init-from hf:DIR's weights, read where they lie. The readers
// (hf_checkpoint.h) check every header when the run starts (names, shapes,
// dtypes, which file holds what) and record here where each parameter's
// bytes are; a value is read only when a unit or a shard asks for a block of
// a parameter (model::WeightSource), and then only that block's bytes
// (SafetensorsFile::read_strided), converted to fp32 a bounded chunk at a
// time. So a rank that keeps a shard (fsdp's cpu_ram_efficient_loading,
// ZeRO-3's zero3_init_flag, a tensor-parallel split) reads about its share of
// the files and holds its slices plus one chunk, never the whole model; the
// values are bit for bit those of reading each tensor whole, converting it
// to fp32 and transposing GPT-2's Conv1D weights.
//
// Errors: CheckpointError naming the file and tensor. Thread-safety: fill it
// (add_file, add) from one thread; after that read_block, summary and the
// counters may run on any thread (pread, an atomic counter).
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/checkpoint/safetensors.h"
#include "host/model/param_init.h"

namespace accel::checkpoint {

class HfWeightSource final : public model::WeightSource {
 public:
  // `origin` names the weights in summary() ("hf:DIR").
  explicit HfWeightSource(std::string origin) : origin_(std::move(origin)) {}

  // Keeps a validated file open until the source is released; returns its
  // index for add().
  size_t add_file(SafetensorsFile file);
  const SafetensorsFile& file(size_t index) const { return files_.at(index); }

  // Parameter `host_name` (of the host's shape `host_shape`) is tensor `info`
  // of file `file`; `transposed`: stored as the transpose of the host's 2-D
  // layout (GPT-2's Conv1D, [in, out]). Throws CheckpointError naming the
  // file and tensor when the stored dtype is not a floating type.
  void add(const std::string& host_name, size_t file, const TensorInfo& info, std::vector<int64_t> host_shape,
           bool transposed);
  // Parameter `host_name` (host shape `host_shape`, [E, ...]) stacked from
  // whole tensors: row e of its matrix view is the concatenation of
  // rows[e]'s tensors, each flattened in its row-major order (Mixtral's
  // experts: one tensor per expert and projection on disk). The sizes must
  // add up (std::logic_error otherwise); dtypes as add().
  // Parameter `host_name` (2-D, `host_shape`) is rows [row0, row0 +
  // host_shape[0]) of the 2-D tensor `info` (Phi-3's fused qkv_proj and
  // gate_up_proj: one tensor on disk, a parameter per projection here).
  void add_rows(const std::string& host_name, size_t file, const TensorInfo& info, int64_t row0,
                std::vector<int64_t> host_shape);
  struct Piece {
    size_t file;
    TensorInfo info;
  };
  void add_stacked(const std::string& host_name, const std::vector<std::vector<Piece>>& rows,
                   std::vector<int64_t> host_shape);
  bool contains(const std::string& host_name) const {
    return located_.count(host_name) != 0 || stacked_.count(host_name) != 0;
  }

  std::map<std::string, std::vector<int64_t>> shapes() const override;
  void read_block(const std::string& name, const model::WeightBlock& block, float* dst, int64_t ld) const override;
  // "initial weights from hf:DIR: this rank read N of the M bytes its parameters hold (P%)".
  std::string summary() const override;

  // Whether tensor `info` of file `file`, read as fp32, equals parameter
  // `host_name` element for element (at::equal's rule), compared a chunk of
  // rows at a time: GPT-2's tied lm_head against wte. The shapes must match
  // (false otherwise). Its reads count in bytes_read().
  bool holds_same_values(size_t file, const TensorInfo& info, const std::string& host_name) const;

  // Bytes read from the files so far, and what the parameters hold stored.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  uint64_t bytes_stored() const { return bytes_stored_; }

  // The largest staging buffer one read uses: a block converts this many
  // stored bytes at a time.
  static constexpr uint64_t kChunkBytes = uint64_t{4} << 20;

 private:
  struct Located {
    size_t file;
    TensorInfo info;
    std::vector<int64_t> shape;  // the host's
    bool transposed;
    at::ScalarType stored_type;
    int64_t row0 = 0;  // the file rows before the parameter's first (add_rows)
  };
  Located locate(size_t file, const TensorInfo& info, std::vector<int64_t> host_shape, bool transposed) const;
  void read_located(const Located& tensor, const model::WeightBlock& block, float* dst, int64_t ld) const;

  std::string origin_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Located> located_;
  struct Stacked {
    std::vector<int64_t> shape;              // the host's
    std::vector<std::vector<Located>> rows;  // per row, its pieces as 1-D tensors
  };
  std::map<std::string, Stacked> stacked_;
  uint64_t bytes_stored_ = 0;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace accel::checkpoint
