// Safetensors header validation, writing and pread-based reading. The rules
// follow the reference implementation (safetensors/src/tensor.rs,
// SafeTensors::read_metadata and Metadata::validate) and are listed in
// docs/checkpoint_format.md; where nlohmann::json is laxer than serde_json
// (NUL ends its input, it skips a BOM, keeps the last of duplicate keys,
// nests without limit) we check first so that we accept exactly what the
// reference accepts, plus a rejection of duplicate names.
// Invariant: parse_safetensors_header throws CheckpointError and nothing
// else; every message is one printable line.
#include "host/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <zlib.h>

#include <accel/sdk/json_input.hpp>  // describe
#include <nlohmann/json.hpp>

#include "accel/sdk/input_file.hpp"

namespace accel::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is written as the host holds it");

using OrderedJson = nlohmann::ordered_json;

// Tensor names and JSON excerpts come from untrusted files: escape anything
// that could break the one-line message, and keep it short.
std::string printable(std::string_view text, size_t max_chars = 120) {
  std::string out;
  size_t i = 0;
  for (; i < text.size() && out.size() < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  if (i < text.size()) out += "...";
  return out;
}

[[noreturn]] void fail(std::string_view source, const std::string& problem) {
  throw CheckpointError(printable(source, 400) + ": " + problem);
}

std::string quote_name(std::string_view name) { return "'" + printable(name) + "'"; }

std::string errno_text(int error) { return std::strerror(error); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

uint64_t read_u64_le(const char* bytes) {
  uint64_t value = 0;
  std::memcpy(&value, bytes, sizeof(value));  // host is little-endian (static_assert above)
  return value;
}

// numel * dtype_size with every multiplication checked; nullopt on overflow.
std::optional<uint64_t> checked_nbytes(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) {
      return std::nullopt;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(dtype)), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},           {DType::U16, "U16", 2},
    {DType::BOOL, "BOOL", 1},       {DType::U32, "U32", 4},
    {DType::U64, "U64", 8},
};

const DTypeRow& row_of(DType dtype) {
  for (const DTypeRow& row : kDTypes) {
    if (row.dtype == dtype) return row;
  }
  throw CheckpointError("dtype: invalid DType value " +
                        std::to_string(static_cast<int>(dtype)));
}

// Reads exactly `size` bytes at `offset` unless the file ends first; returns
// the count read. Retries short reads and EINTR.
size_t pread_fully(int fd, char* dst, size_t size, uint64_t offset, std::string_view source) {
  size_t done = 0;
  while (done < size) {
    const size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
    const ssize_t got = ::pread(fd, dst + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(source, "read failed: " + errno_text(errno));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void write_fully(int fd, const char* src, size_t size, std::string_view source) {
  while (size > 0) {
    const size_t chunk = std::min<size_t>(size, size_t{1} << 30);
    const ssize_t put = ::write(fd, src, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail(source, "write failed: " + errno_text(errno));
    }
    src += put;
    size -= static_cast<size_t>(put);
  }
}

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Parses the JSON text with the checks nlohmann leaves out: nesting deeper
// than a header needs (root object > entry object > shape array) and
// duplicate keys at any level (serde rejects a repeated field; a repeated
// tensor name would silently shadow another tensor).
OrderedJson parse_header_json(std::string_view text, std::string_view source) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    fail(source, "header contains a NUL byte at offset " + std::to_string(8 + nul));
  }
  const size_t first = std::find_if_not(text.begin(), text.end(), is_json_space) - text.begin();
  if (first == text.size() || text[first] != '{') {
    fail(source, "header is not a JSON object (it starts with " +
                     quote_name(text.substr(first, 16)) + ")");
  }
  struct TooDeep {};
  struct DuplicateKey {
    std::string key;
    int depth;
  };
  std::vector<std::set<std::string>> keys_per_open_object;
  auto check = [&](int depth, OrderedJson::parse_event_t event, OrderedJson& value) {
    using Event = OrderedJson::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      if (depth > 2) throw TooDeep{};
      if (event == Event::object_start) keys_per_open_object.emplace_back();
    } else if (event == Event::object_end) {
      keys_per_open_object.pop_back();
    } else if (event == Event::key) {
      const auto& key = value.get_ref<const std::string&>();
      if (!keys_per_open_object.back().insert(key).second) throw DuplicateKey{key, depth};
    }
    return true;
  };
  OrderedJson root;
  try {
    root = OrderedJson::parse(text.begin(), text.end(), check);
  } catch (const TooDeep&) {
    fail(source, "header JSON nests deeper than a safetensors header (object > entry > shape)");
  } catch (const DuplicateKey& duplicate) {
    fail(source, duplicate.depth == 1 ? "duplicate tensor name " + quote_name(duplicate.key)
                                      : "duplicate key " + quote_name(duplicate.key) +
                                            " inside a header entry");
  } catch (const nlohmann::json::exception& error) {
    fail(source, std::string("header is not valid JSON: ") + printable(error.what(), 200));
  }
  return root;
}

uint64_t unsigned_field(const OrderedJson& value, std::string_view tensor, const char* what) {
  if (!value.is_number_unsigned()) {
    throw CheckpointError("tensor " + quote_name(tensor) + ": " + what +
                          " must be a non-negative integer, got " + sdk::describe(nlohmann::json(value)));
  }
  return value.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const OrderedJson& entry,
                       uint64_t data_section_bytes) {
  const std::string who = "tensor " + quote_name(name) + ": ";
  if (!entry.is_object()) throw CheckpointError(who + "entry is not a JSON object");
  // Unknown extra fields are ignored, as serde does for the reference.
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end()) throw CheckpointError(who + "missing \"dtype\"");
  if (shape_it == entry.end()) throw CheckpointError(who + "missing \"shape\"");
  if (offsets_it == entry.end()) throw CheckpointError(who + "missing \"data_offsets\"");

  if (!dtype_it->is_string()) throw CheckpointError(who + "\"dtype\" is not a string");
  const auto dtype = dtype_from_name(dtype_it->get_ref<const std::string&>());
  if (!dtype) {
    throw CheckpointError(who + "unsupported dtype " +
                          quote_name(dtype_it->get_ref<const std::string&>()));
  }

  if (!shape_it->is_array()) throw CheckpointError(who + "\"shape\" is not an array");
  std::vector<int64_t> shape;
  for (const OrderedJson& dim : *shape_it) {
    const uint64_t value = unsigned_field(dim, name, "each \"shape\" dimension");
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw CheckpointError(who + "shape dimension " + std::to_string(value) + " is too large");
    }
    shape.push_back(static_cast<int64_t>(value));
  }

  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    throw CheckpointError(who + "\"data_offsets\" must be an array [begin, end]");
  }
  const uint64_t begin = unsigned_field((*offsets_it)[0], name, "data_offsets begin");
  const uint64_t end = unsigned_field((*offsets_it)[1], name, "data_offsets end");
  const std::string span = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (end < begin) throw CheckpointError(who + "data_offsets " + span + " end before begin");
  if (end > data_section_bytes) {
    throw CheckpointError(who + "data_offsets " + span + " run past the data section of " +
                          std::to_string(data_section_bytes) + " bytes (file truncated?)");
  }

  const auto nbytes = checked_nbytes(shape, *dtype);
  if (!nbytes) {
    throw CheckpointError(who + "shape " + shape_text(shape) + " of " +
                          std::string(dtype_name(*dtype)) + " overflows 64-bit byte count");
  }
  if (end - begin != *nbytes) {
    throw CheckpointError(who + "data_offsets " + span + " span " + std::to_string(end - begin) +
                          " bytes but shape " + shape_text(shape) + " of " +
                          std::string(dtype_name(*dtype)) + " needs " + std::to_string(*nbytes));
  }
  return TensorInfo{name, *dtype, std::move(shape), begin, end};
}

}  // namespace

// ---------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------

size_t dtype_size(DType dtype) { return row_of(dtype).size; }

std::string_view dtype_name(DType dtype) { return row_of(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeRow& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

uint64_t TensorInfo::numel() const {
  uint64_t count = 1;
  for (int64_t dim : shape) count *= static_cast<uint64_t>(dim);  // validated: no overflow
  return count;
}

// ---------------------------------------------------------------------------
// Header validation
// ---------------------------------------------------------------------------

SafetensorsHeader parse_safetensors_header(std::string_view file_prefix, uint64_t file_size,
                                           std::string_view source) {
  if (file_size < 8) {
    fail(source, "file has " + std::to_string(file_size) +
                     " bytes, fewer than the 8-byte header length");
  }
  if (file_prefix.size() > file_size) {
    fail(source, "given " + std::to_string(file_prefix.size()) + " bytes of a file said to have " +
                     std::to_string(file_size));
  }
  if (file_prefix.size() < 8) {
    fail(source, "given only " + std::to_string(file_prefix.size()) +
                     " bytes; need at least the 8-byte header length");
  }
  const uint64_t header_bytes = read_u64_le(file_prefix.data());
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    fail(source, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_bytes > file_size - 8) {
    fail(source, "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                     std::to_string(file_size) + "-byte file (truncated?)");
  }
  if (file_prefix.size() - 8 < header_bytes) {
    fail(source, "given only " + std::to_string(file_prefix.size()) +
                     " bytes; the header needs " + std::to_string(8 + header_bytes));
  }

  const OrderedJson root = parse_header_json(file_prefix.substr(8, header_bytes), source);
  SafetensorsHeader header;
  header.header_bytes = header_bytes;
  header.file_size = file_size;
  const uint64_t data_section_bytes = file_size - 8 - header_bytes;

  try {
    for (const auto& [key, value] : root.items()) {
      if (key == "__metadata__") {
        if (value.is_null()) continue;  // serde reads null as "no metadata"
        if (!value.is_object()) throw CheckpointError("\"__metadata__\" is not a JSON object");
        for (const auto& [meta_key, meta_value] : value.items()) {
          if (!meta_value.is_string()) {
            throw CheckpointError("\"__metadata__\" value for key " + quote_name(meta_key) +
                                  " is not a string");
          }
          header.metadata.emplace(meta_key, meta_value.get<std::string>());
        }
        continue;
      }
      header.tensors.push_back(parse_entry(key, value, data_section_bytes));
    }
  } catch (const CheckpointError& error) {
    fail(source, error.what());
  }

  // Sorting by offsets (stable, so equal zero-byte tensors keep the writer's
  // order) turns "contiguous, no holes, no overlap" into one linear pass.
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) {
                     return std::pair(a.data_begin, a.data_end) <
                            std::pair(b.data_begin, b.data_end);
                   });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& tensor : header.tensors) {
    if (tensor.data_begin > covered) {
      fail(source, "data bytes [" + std::to_string(covered) + ", " +
                       std::to_string(tensor.data_begin) + ") belong to no tensor (hole before " +
                       quote_name(tensor.name) + ")");
    }
    if (tensor.data_begin < covered) {
      fail(source, "tensor " + quote_name(tensor.name) + " starts at " +
                       std::to_string(tensor.data_begin) + ", overlapping " +
                       quote_name(previous->name) + " which ends at " + std::to_string(covered));
    }
    covered = tensor.data_end;
    previous = &tensor;
  }
  if (covered != data_section_bytes) {
    fail(source, "data section has " + std::to_string(data_section_bytes) +
                     " bytes but the tensors cover " + std::to_string(covered) +
                     " (trailing bytes after the last tensor)");
  }
  return header;
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data, size_t nbytes) {
  const std::string who = "safetensors writer: tensor " + quote_name(name) + ": ";
  if (name == "__metadata__") throw CheckpointError(who + "the name is reserved for metadata");
  if (index_of_name_.count(name) != 0) throw CheckpointError(who + "added twice");
  const auto expected = checked_nbytes(shape, dtype);
  if (!expected) {
    throw CheckpointError(who + "shape " + shape_text(shape) +
                          " has a negative dimension or overflows 64-bit byte count");
  }
  if (*expected != nbytes) {
    throw CheckpointError(who + "shape " + shape_text(shape) + " of " +
                          std::string(dtype_name(dtype)) + " needs " + std::to_string(*expected) +
                          " bytes, given " + std::to_string(nbytes));
  }
  if (data == nullptr && nbytes != 0) throw CheckpointError(who + "null data");
  uint64_t data_bytes = 0;
  if (__builtin_add_overflow(data_bytes_, static_cast<uint64_t>(nbytes), &data_bytes)) {
    throw CheckpointError(who + "file size overflows 64 bits");
  }
  data_bytes_ = data_bytes;
  index_of_name_.emplace(name, tensors_.size());
  tensors_.push_back(PendingTensor{std::move(name), dtype, std::move(shape), data, nbytes});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_.insert_or_assign(std::move(key), std::move(value));
}

std::string SafetensorsWriter::header_bytes() const {
  OrderedJson root = OrderedJson::object();
  if (!metadata_.empty()) {
    OrderedJson metadata = OrderedJson::object();
    for (const auto& [key, value] : metadata_) metadata[key] = value;
    root["__metadata__"] = std::move(metadata);
  }
  uint64_t offset = 0;
  for (const PendingTensor& tensor : tensors_) {
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(dtype_name(tensor.dtype));
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {offset, offset + tensor.nbytes};
    root[tensor.name] = std::move(entry);
    offset += tensor.nbytes;
  }
  std::string json;
  try {
    json = root.dump();
  } catch (const nlohmann::json::exception&) {
    throw CheckpointError("safetensors writer: a tensor name or metadata string is not UTF-8");
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the reference pads to 8 for aligned data
  const uint64_t length = json.size();
  std::string out(sizeof(length), '\0');
  std::memcpy(out.data(), &length, sizeof(length));
  return out + json;
}

uint64_t SafetensorsWriter::file_size() const { return header_bytes().size() + data_bytes_; }

SafetensorsWriter::Written SafetensorsWriter::write(const std::filesystem::path& path) const {
  const std::string header = header_bytes();
  const std::string source = path.string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(source, "cannot create: " + errno_text(errno));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  try {
    write_fully(fd, header.data(), header.size(), source);
    crc = ::crc32_z(crc, reinterpret_cast<const Bytef*>(header.data()), header.size());
    for (const PendingTensor& tensor : tensors_) {
      // The checksum of what was written, read from the same memory: a
      // slice changing under the write would fail the manifest's check later.
      // (Never with an empty tensor's null pointer: zlib restarts at 0 then.)
      write_fully(fd, static_cast<const char*>(tensor.data), tensor.nbytes, source);
      if (tensor.nbytes > 0) crc = ::crc32_z(crc, static_cast<const Bytef*>(tensor.data), tensor.nbytes);
    }
    if (::fsync(fd) != 0) fail(source, "fsync failed: " + errno_text(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  // close() can report a deferred write error (NFS); the file is then suspect.
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(path.c_str());
    fail(source, "close failed: " + errno_text(error));
  }
  return {header.size() + data_bytes_, static_cast<uint32_t>(crc)};
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string source = path.string();
  // The SDK's one rule for inputs: a FIFO named as a weight file (an hf:
  // directory's model.safetensors or a shard) is refused, never waited on;
  // a symlink is followed (the Hugging Face cache is made of them).
  int fd;
  uint64_t file_size;
  try {
    sdk::InputFile opened = sdk::open_input_file(source);
    file_size = opened.size();
    fd = opened.release();
  } catch (const sdk::InputFileError& e) {
    throw CheckpointError(e.what());
  }
  try {

    // Read the length first and only allocate for a header that can be valid.
    std::string prefix(std::min<uint64_t>(file_size, 8), '\0');
    if (pread_fully(fd, prefix.data(), prefix.size(), 0, source) != prefix.size()) {
      fail(source, "file shrank while being opened");
    }
    if (prefix.size() == 8) {
      const uint64_t header_bytes = read_u64_le(prefix.data());
      if (header_bytes <= kMaxSafetensorsHeaderBytes && header_bytes <= file_size - 8) {
        prefix.resize(8 + header_bytes);
        if (pread_fully(fd, prefix.data() + 8, header_bytes, 8, source) != header_bytes) {
          fail(source, "file shrank while being opened");
        }
      }
    }
    SafetensorsHeader header = parse_safetensors_header(prefix, file_size, source);
    return SafetensorsFile(path, fd, std::move(header));
  } catch (...) {
    ::close(fd);
    throw;
  }
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path, int fd, SafetensorsHeader header)
    : path_(std::move(path)), fd_(fd), header_(std::move(header)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) {
    index_of_name_.emplace(header_.tensors[i].name, i);
  }
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      header_(std::move(other.header_)),
      index_of_name_(std::move(other.index_of_name_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::move(other.header_);
    index_of_name_ = std::move(other.index_of_name_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_of_name_.find(name);
  return it == index_of_name_.end() ? nullptr : &header_.tensors[it->second];
}

void SafetensorsFile::read(const TensorInfo& info, void* dst, size_t dst_bytes) const {
  if (dst_bytes != info.nbytes()) {
    fail(path_.string(), "tensor " + quote_name(info.name) + " has " +
                             std::to_string(info.nbytes()) + " bytes but the destination has " +
                             std::to_string(dst_bytes));
  }
  read_bytes(info, 0, dst, dst_bytes);
}

void SafetensorsFile::read_bytes(const TensorInfo& info, uint64_t offset_in_tensor, void* dst,
                                 size_t nbytes) const {
  // The path is formatted only for a message: read_strided calls this once
  // per run, possibly thousands of times per slice.
  const std::string_view source = path_.native();
  if (fd_ < 0) fail(source, "read from a moved-from SafetensorsFile");
  // A TensorInfo from another file could point anywhere: check against ours.
  if (info.data_begin > info.data_end || info.data_end > header_.data_section_bytes()) {
    fail(source, "tensor " + quote_name(info.name) + " does not belong to this file");
  }
  uint64_t stop = 0;
  if (__builtin_add_overflow(offset_in_tensor, static_cast<uint64_t>(nbytes), &stop) ||
      stop > info.nbytes()) {
    fail(source, "read of " + std::to_string(nbytes) + " bytes at " +
                     std::to_string(offset_in_tensor) + " runs past tensor " + quote_name(info.name) +
                     " of " + std::to_string(info.nbytes()) + " bytes");
  }
  const uint64_t file_offset = header_.data_section_offset() + info.data_begin + offset_in_tensor;
  if (pread_fully(fd_, static_cast<char*>(dst), nbytes, file_offset, source) != nbytes) {
    fail(source, "file ended inside tensor " + quote_name(info.name) + " (truncated after open?)");
  }
}

void SafetensorsFile::read_strided(const TensorInfo& info, uint64_t offset_in_tensor, size_t run_bytes,
                                   uint64_t stride_bytes, size_t runs, void* dst) const {
  if (runs == 0 || run_bytes == 0) return;
  if (stride_bytes == run_bytes || runs == 1) {
    uint64_t total = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(run_bytes), static_cast<uint64_t>(runs), &total) ||
        total > std::numeric_limits<size_t>::max()) {
      fail(path_.string(), "read of " + std::to_string(runs) + " runs of " + std::to_string(run_bytes) +
                               " bytes overflows in tensor " + quote_name(info.name));
    }
    read_bytes(info, offset_in_tensor, dst, static_cast<size_t>(total));
    return;
  }
  // The last run's end bounds them all: checked once, then each run is a
  // plain read_bytes (which checks again against the tensor).
  uint64_t last = 0, stop = 0;
  if (stride_bytes < run_bytes ||
      __builtin_mul_overflow(stride_bytes, static_cast<uint64_t>(runs - 1), &last) ||
      __builtin_add_overflow(offset_in_tensor, last, &last) ||
      __builtin_add_overflow(last, static_cast<uint64_t>(run_bytes), &stop) || stop > info.nbytes()) {
    fail(path_.string(), "strided read of " + std::to_string(runs) + " runs of " + std::to_string(run_bytes) +
                             " bytes every " + std::to_string(stride_bytes) + " from " +
                             std::to_string(offset_in_tensor) + " does not fit tensor " + quote_name(info.name) +
                             " of " + std::to_string(info.nbytes()) + " bytes");
  }
  auto* out = static_cast<char*>(dst);
  for (size_t i = 0; i < runs; ++i) {
    read_bytes(info, offset_in_tensor + i * stride_bytes, out + i * run_bytes, run_bytes);
  }
}

}  // namespace accel::checkpoint
