// Hugging Face weights read block by block (see hf_weight_source.h).
//
// A block of the host's matrix view is, in the file, a band of rows with a
// run of columns each: for a tensor stored as the host keeps it, rows of the
// block are rows of the file; for a transposed one (Conv1D), the block's
// columns are the file's rows. Either way one strided read per chunk of file
// rows, then at::Tensor::copy_ converts (and transposes) into the caller's
// buffer: the same cast kernel Tensor::to uses, so the values are those of
// converting the whole tensor.
#include "host/checkpoint/hf_weight_source.h"

#include <algorithm>
#include <cinttypes>
#include <memory>
#include <stdexcept>

#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

at::ScalarType torch_type(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F64: return at::kDouble;
    default:
      throw CheckpointError(where + ": dtype " + std::string(dtype_name(dtype)) + " is not a floating weight type");
  }
}

}  // namespace

size_t HfWeightSource::add_file(SafetensorsFile file) {
  files_.push_back(std::move(file));
  return files_.size() - 1;
}

HfWeightSource::Located HfWeightSource::locate(size_t file, const TensorInfo& info, std::vector<int64_t> host_shape,
                                               bool transposed) const {
  const std::string where = files_.at(file).path().string() + ": " + info.name;
  const at::ScalarType type = torch_type(info.dtype, where);
  if (transposed && host_shape.size() != 2) throw std::logic_error(where + ": only a 2-D weight is stored transposed");
  return Located{file, info, std::move(host_shape), transposed, type};
}

void HfWeightSource::add(const std::string& host_name, size_t file, const TensorInfo& info,
                         std::vector<int64_t> host_shape, bool transposed) {
  Located tensor = locate(file, info, std::move(host_shape), transposed);
  bytes_stored_ += info.nbytes();
  located_.insert_or_assign(host_name, std::move(tensor));
}

void HfWeightSource::add_rows(const std::string& host_name, size_t file, const TensorInfo& info, int64_t row0,
                              std::vector<int64_t> host_shape) {
  if (info.shape.size() != 2 || host_shape.size() != 2 || host_shape[1] != info.shape[1] || row0 < 0 ||
      row0 + host_shape[0] > info.shape[0]) {
    throw std::logic_error(host_name + ": rows outside " + info.name);
  }
  Located tensor = locate(file, info, std::move(host_shape), /*transposed=*/false);
  tensor.row0 = row0;
  bytes_stored_ += static_cast<uint64_t>(tensor.shape[0] * tensor.shape[1]) * dtype_size(info.dtype);
  located_.insert_or_assign(host_name, std::move(tensor));
}

void HfWeightSource::add_stacked(const std::string& host_name, const std::vector<std::vector<Piece>>& rows,
                                 std::vector<int64_t> host_shape) {
  const auto [matrix_rows, matrix_cols] = model::weight_matrix_shape(host_shape);
  if (static_cast<int64_t>(rows.size()) != matrix_rows) {
    throw std::logic_error(host_name + ": " + std::to_string(rows.size()) + " stacked rows for " +
                           std::to_string(matrix_rows));
  }
  Stacked stacked{std::move(host_shape), {}};
  for (const std::vector<Piece>& pieces : rows) {
    std::vector<Located> row;
    int64_t width = 0;
    for (const Piece& piece : pieces) {
      int64_t numel = 1;
      for (const int64_t d : piece.info.shape) numel *= d;
      row.push_back(locate(piece.file, piece.info, {numel}, /*transposed=*/false));
      bytes_stored_ += piece.info.nbytes();
      width += numel;
    }
    if (width != matrix_cols) {
      throw std::logic_error(host_name + ": a stacked row of " + std::to_string(width) + " elements for " +
                             std::to_string(matrix_cols));
    }
    stacked.rows.push_back(std::move(row));
  }
  stacked_.insert_or_assign(host_name, std::move(stacked));
}

std::map<std::string, std::vector<int64_t>> HfWeightSource::shapes() const {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, tensor] : located_) out.emplace(name, tensor.shape);
  for (const auto& [name, stacked] : stacked_) out.emplace(name, stacked.shape);
  return out;
}

void HfWeightSource::read_block(const std::string& name, const model::WeightBlock& block, float* dst,
                                int64_t ld) const {
  const auto found = located_.find(name);
  if (found != located_.end()) return read_located(found->second, block, dst, ld);
  const auto stacked = stacked_.find(name);
  if (stacked == stacked_.end()) throw std::logic_error("the initial weights from " + origin_ + " hold no parameter " + name);
  const auto [rows, cols] = model::weight_matrix_shape(stacked->second.shape);
  if (block.row0 < 0 || block.rows < 0 || block.col0 < 0 || block.cols < 0 || block.row0 + block.rows > rows ||
      block.col0 + block.cols > cols) {
    throw std::logic_error("parameter " + name + ": block out of range");
  }
  // Each row's pieces side by side: read the part of each the block covers.
  for (int64_t r = 0; r < block.rows; ++r) {
    int64_t start = 0;
    for (const Located& piece : stacked->second.rows[static_cast<size_t>(block.row0 + r)]) {
      const int64_t length = piece.shape[0];
      const int64_t from = std::max(start, block.col0), to = std::min(start + length, block.col0 + block.cols);
      if (from < to) {
        read_located(piece, model::WeightBlock{0, 1, from - start, to - from}, dst + r * ld + (from - block.col0), to - from);
      }
      start += length;
    }
  }
}

void HfWeightSource::read_located(const Located& tensor, const model::WeightBlock& block, float* dst,
                                  int64_t ld) const {
  const auto [rows, cols] = model::weight_matrix_shape(tensor.shape);
  if (block.row0 < 0 || block.rows < 0 || block.col0 < 0 || block.cols < 0 || block.row0 + block.rows > rows ||
      block.col0 + block.cols > cols || (block.rows > 1 && ld < block.cols)) {
    throw std::logic_error("parameter " + tensor.info.name + ": block out of range");
  }
  if (block.rows == 0 || block.cols == 0) return;
  const SafetensorsFile& file = files_.at(tensor.file);
  const auto element = static_cast<uint64_t>(dtype_size(tensor.info.dtype));
  // In the file's own row-major layout: `file_rows` rows from `file_row0`,
  // `run` elements of each from column `file_col0`, rows `file_width` apart.
  const int64_t file_width = tensor.transposed ? rows : cols;
  const int64_t file_row0 = tensor.row0 + (tensor.transposed ? block.col0 : block.row0);
  const int64_t file_rows = tensor.transposed ? block.cols : block.rows;
  const int64_t file_col0 = tensor.transposed ? block.row0 : block.col0;
  const int64_t run = tensor.transposed ? block.rows : block.cols;
  const uint64_t run_bytes = static_cast<uint64_t>(run) * element;
  const int64_t chunk_rows = static_cast<int64_t>(std::max<uint64_t>(1, kChunkBytes / run_bytes));
  const bool direct = tensor.stored_type == at::kFloat && !tensor.transposed && (ld == run || block.rows == 1);
  std::unique_ptr<char[]> staging;
  if (!direct) staging.reset(new char[static_cast<size_t>(std::min(chunk_rows, file_rows)) * run_bytes]);
  for (int64_t r = 0; r < file_rows; r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, file_rows - r);
    const uint64_t offset = (static_cast<uint64_t>(file_row0 + r) * file_width + file_col0) * element;
    // fp32 stored as the host keeps it lands in place; anything else is
    // staged, then converted (and transposed) by copy_.
    char* into = direct ? reinterpret_cast<char*>(dst + r * ld) : staging.get();
    file.read_strided(tensor.info, offset, run_bytes, static_cast<uint64_t>(file_width) * element,
                      static_cast<size_t>(n), into);
    bytes_read_.fetch_add(static_cast<uint64_t>(n) * run_bytes, std::memory_order_relaxed);
    if (direct) continue;
    const at::Tensor stored = at::from_blob(staging.get(), {n, run}, at::TensorOptions().dtype(tensor.stored_type));
    if (tensor.transposed) {
      // File rows are the block's columns [r, r + n).
      at::from_blob(dst + r, {run, n}, {ld, 1}, at::kFloat).copy_(stored.t());
    } else {
      at::from_blob(dst + r * ld, {n, run}, {ld, 1}, at::kFloat).copy_(stored);
    }
  }
}

bool HfWeightSource::holds_same_values(size_t file, const TensorInfo& info, const std::string& host_name) const {
  const Located& theirs = located_.at(host_name);
  if (info.shape != theirs.shape) return false;
  const Located ours = locate(file, info, theirs.shape, /*transposed=*/false);
  const auto [rows, cols] = model::weight_matrix_shape(theirs.shape);
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / sizeof(float)) / std::max<int64_t>(cols, 1));
  at::Tensor a = at::empty({std::min(chunk_rows, rows), cols}, at::kFloat);
  at::Tensor b = at::empty_like(a);
  for (int64_t r = 0; r < rows; r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r);
    read_located(ours, model::WeightBlock{r, n, 0, cols}, a.data_ptr<float>(), cols);
    read_located(theirs, model::WeightBlock{r, n, 0, cols}, b.data_ptr<float>(), cols);
    if (!at::equal(a.narrow(0, 0, n), b.narrow(0, 0, n))) return false;
  }
  return true;
}

std::string HfWeightSource::summary() const {
  const uint64_t read = bytes_read(), stored = bytes_stored();
  return strformat("initial weights from %s: this rank read %" PRIu64 " of the %" PRIu64
                   " bytes its parameters hold (%.1f%%)",
                   origin_.c_str(), read, stored, stored == 0 ? 0.0 : 100.0 * static_cast<double>(read) / stored);
}

}  // namespace accel::checkpoint
