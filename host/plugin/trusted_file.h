// Opening a plugin file so that the file that was checked is the file that
// is inspected and loaded.
//
// Checking a path and then opening it again (for the ELF inspection, for
// dlopen) lets a symlink or a directory swapped in between run another user's
// code. So the path is walked one component at a time from "/" with
// openat(O_NOFOLLOW) on the directory descriptor already checked, following
// symbolic links by hand (their targets are walked the same way), and the
// final descriptor is fstat'ed, checked and kept open: the ELF inspection and
// dlopen then open /proc/self/fd/N, which is that same inode whatever happens
// to the names meanwhile.
//
// The rules, those of OpenSSH's StrictModes (safe_path(): the file and every
// directory above it owned by root or the user, writable by nobody else),
// with one relaxation ssh does not make:
// - every directory walked through (the path's and every symlink target's)
//   is owned by root or the effective user and writable by no one else;
// - a sticky directory (like /tmp, mode 1777) may be writable by others when
//   it is passed through: the sticky bit stops them renaming or removing
//   entries they do not own, so the entry below it, checked like any other,
//   cannot be swapped (the reasoning of the kernel's fs.protected_symlinks
//   and systemd's chase());
// - but not the directory that holds the file: the sticky bit stops
//   removals, not additions, and whoever may add files there chooses what
//   sits under a plugin's name (a hard link to any root-owned library passes
//   every check on the file);
// - a symbolic link is owned by root or the effective user: its owner
//   chooses where it points, so which file is loaded (its mode means
//   nothing); its target is walked and checked like the rest;
// - the file is a regular file owned by root or the effective user and
//   writable by no one else;
// - "no one else" includes the file's or directory's group, unless that group
//   is root's (gid 0): group members are users we cannot see from here, and
//   any of them could replace the code we run (sudo refuses a group-writable
//   sudoers for the same reason).
// ld.so itself checks no modes; it restricts setuid programs to the system
// library directories instead, which is not an option for plugins.
//
// Thread-safety: no shared state; each TrustedFile owns its descriptor.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

namespace accel::plugin {

class TrustedFile {
 public:
  // Opens `file` (relative paths from the current directory) under the rules
  // above. Throws PluginError("<file>: refused: <reason>") naming the
  // directory or file at fault.
  static TrustedFile open(const std::filesystem::path& file);

  TrustedFile(TrustedFile&& other) noexcept;
  TrustedFile& operator=(TrustedFile&& other) noexcept;
  TrustedFile(const TrustedFile&) = delete;
  TrustedFile& operator=(const TrustedFile&) = delete;
  ~TrustedFile();

  int fd() const { return fd_; }
  // The path as walked, every symlink resolved (for messages).
  const std::filesystem::path& resolved() const { return resolved_; }
  // "/proc/self/fd/N": opening it opens this descriptor's file, not a name.
  std::string proc_path() const { return "/proc/self/fd/" + std::to_string(fd_); }
  // Gives the descriptor up without closing it (it stays open).
  int release() { return std::exchange(fd_, -1); }

 private:
  TrustedFile(int fd, std::filesystem::path resolved) : fd_(fd), resolved_(std::move(resolved)) {}
  int fd_ = -1;
  std::filesystem::path resolved_;
};

}  // namespace accel::plugin
