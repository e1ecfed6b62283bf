// The dynamic section of an ELF file, read through pread (see elf_dynamic.h).
#include "host/plugin/elf_dynamic.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace accel::plugin {
namespace {

// Far beyond any real library's tables; bounds what a damaged header can
// make us allocate.
constexpr uint64_t kMaxTableBytes = 64ull << 20;

class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw std::runtime_error(std::string("cannot stat: ") + std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  uint64_t size() const { return size_; }

  // `bytes` at `offset`, which must lie inside the file.
  std::string read(uint64_t offset, uint64_t bytes, const char* what) const {
    if (bytes > kMaxTableBytes || offset > size_ || bytes > size_ - offset) {
      throw std::runtime_error(std::string("its ") + what + " lies outside the file");
    }
    std::string out(static_cast<size_t>(bytes), '\0');
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t got = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw std::runtime_error(std::string("cannot read its ") + what);
      done += static_cast<size_t>(got);
    }
    return out;
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

template <class T>
T at(const std::string& bytes, size_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

ElfDynamic read_elf_dynamic(int fd) {
  const Reader file(fd);
  ElfDynamic result;
  if (file.size() < sizeof(Elf64_Ehdr)) return result;
  const auto header = at<Elf64_Ehdr>(file.read(0, sizeof(Elf64_Ehdr), "ELF header"), 0);
  constexpr unsigned char kOurByteOrder = std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB;
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_ident[EI_DATA] != kOurByteOrder) {
    return result;
  }
  if (header.e_phentsize != sizeof(Elf64_Phdr)) {
    throw std::runtime_error("its program header entries have an unknown size");
  }
  const std::string table =
      file.read(header.e_phoff, uint64_t{header.e_phnum} * sizeof(Elf64_Phdr), "program header table");
  std::vector<Elf64_Phdr> loads;
  std::optional<Elf64_Phdr> dynamic;
  for (size_t i = 0; i < header.e_phnum; ++i) {
    const auto segment = at<Elf64_Phdr>(table, i);
    if (segment.p_type == PT_LOAD) loads.push_back(segment);
    if (segment.p_type == PT_DYNAMIC) dynamic = segment;
  }
  if (!dynamic) return result;

  // Addresses in the dynamic section are virtual: the loaded segment that
  // holds one says where its bytes are in the file.
  const auto file_offset = [&](uint64_t address, const char* what) {
    for (const Elf64_Phdr& segment : loads) {
      if (address >= segment.p_vaddr && address - segment.p_vaddr < segment.p_filesz) {
        return segment.p_offset + (address - segment.p_vaddr);
      }
    }
    throw std::runtime_error(std::string("its ") + what + " is in no loaded segment");
  };

  const std::string entries = file.read(dynamic->p_offset, dynamic->p_filesz, "dynamic section");
  std::optional<uint64_t> strtab, strsz, runpath, rpath, soname;
  std::vector<uint64_t> needed;
  for (size_t i = 0; i < entries.size() / sizeof(Elf64_Dyn); ++i) {
    const auto entry = at<Elf64_Dyn>(entries, i);
    if (entry.d_tag == DT_NULL) break;
    const uint64_t value = entry.d_un.d_val;
    switch (entry.d_tag) {
      case DT_STRTAB: strtab = value; break;
      case DT_STRSZ: strsz = value; break;
      case DT_NEEDED: needed.push_back(value); break;
      case DT_RUNPATH: runpath = value; break;
      case DT_RPATH: rpath = value; break;
      case DT_SONAME: soname = value; break;
      default: break;
    }
  }
  if (needed.empty() && !soname && !runpath && !rpath) return result;
  if (!strtab || !strsz) throw std::runtime_error("its dynamic section has no string table");
  const std::string strings = file.read(file_offset(*strtab, "string table"), *strsz, "string table");
  const auto string_at = [&](uint64_t offset) {
    const size_t end = offset < strings.size() ? strings.find('\0', offset) : std::string::npos;
    if (end == std::string::npos) throw std::runtime_error("its dynamic section names a string outside its table");
    return strings.substr(offset, end - offset);
  };
  for (uint64_t offset : needed) result.needed.push_back(string_at(offset));
  if (soname) result.soname = string_at(*soname);
  if (runpath || rpath) {
    const std::string path = string_at(runpath ? *runpath : *rpath);
    size_t start = 0;
    for (;;) {
      const size_t colon = path.find(':', start);
      result.search_path.push_back(path.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  return result;
}

}  // namespace accel::plugin
