// What the dynamic loader reads from a shared library's dynamic section
// before mapping it: the libraries it needs (DT_NEEDED), where it asks for
// them to be searched (DT_RUNPATH, else DT_RPATH) and its own name
// (DT_SONAME). The plugin loader reads these from the descriptor it checked
// (trusted_file.h) so that libraries a plugin ships beside itself, which it
// finds through $ORIGIN, are checked and opened the same way before any of
// their code runs (loaded_plugin.cpp).
//
// Reads a 64-bit ELF of the host's byte order with pread, every offset and
// size bounded by the file: a damaged file is one error line, never a read
// outside it. Thread-safety: a pure function of the descriptor's content.
#pragma once

#include <string>
#include <vector>

namespace accel::plugin {

struct ElfDynamic {
  std::vector<std::string> needed;       // DT_NEEDED, in order
  std::vector<std::string> search_path;  // DT_RUNPATH's entries, else DT_RPATH's (ld.so ignores RPATH beside RUNPATH)
  std::string soname;                    // DT_SONAME; empty when the library has none
};

// Reads the dynamic section of the file open on `fd`. A file that is not a
// 64-bit ELF of this byte order, or has no dynamic section, gives an empty
// ElfDynamic (dlopen then says what is wrong). Throws std::runtime_error
// with the reason when the headers point outside the file.
ElfDynamic read_elf_dynamic(int fd);

}  // namespace accel::plugin
