// The race-free trust check of a plugin file (see trusted_file.h).
#include "host/plugin/trusted_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <utility>

#include "host/plugin/plugin_error.h"

namespace accel::plugin {
namespace {

namespace fs = std::filesystem;

// Linux's own limit on symbolic links followed in one lookup.
constexpr int kMaxSymlinks = 40;

// An owned descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// What is being judged: a directory walked through, the directory that
// holds the file itself, or the file.
enum class Role { passed_directory, holding_directory, file };

std::string not_ours(const struct stat& st) {
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return "owned by uid " + std::to_string(st.st_uid) + ", neither root nor the current user";
  }
  return "";
}

// Empty when `st` may be trusted; else why not ("owned by ...", "writable by ...").
std::string distrust(const struct stat& st, Role role) {
  if (std::string why = not_ours(st); !why.empty()) return why;
  // In a sticky directory only an entry's owner (or the directory's, checked
  // above) may rename or remove it: writers cannot swap what we walk into.
  // Not so for the directory holding the file: there, whoever may write
  // chooses which files sit under plugin names (a hard link to any
  // root-owned library passes every check on the file), and the sticky bit
  // does not stop them adding one.
  if (role == Role::passed_directory && (st.st_mode & S_ISVTX)) return "";
  const char* sticky_note = role == Role::holding_directory && (st.st_mode & S_ISVTX)
                                ? "; the sticky bit does not stop others adding files beside the plugin"
                                : "";
  if (st.st_mode & S_IWOTH) return "writable by other users (mode " + octal_mode(st.st_mode) + sticky_note + ")";
  if ((st.st_mode & S_IWGRP) && st.st_gid != 0) {
    return "writable by its group, gid " + std::to_string(st.st_gid) + " (mode " + octal_mode(st.st_mode) +
           "; only root's group may write to a plugin or the directories above it)";
  }
  return "";
}

// The components of `path`, in order, pushed at the front of `remaining`.
void push_front(std::deque<std::string>& remaining, const fs::path& path) {
  std::deque<std::string> parts;
  for (const fs::path& part : path.relative_path()) parts.push_back(part.string());
  remaining.insert(remaining.begin(), parts.begin(), parts.end());
}

}  // namespace

TrustedFile TrustedFile::open(const fs::path& file) {
  const std::string label = file.string();
  auto refuse = [&](const std::string& why) -> PluginError { return PluginError(label + ": refused: " + why); };
  auto system_error = [&](const std::string& what) -> PluginError {
    return PluginError(label + ": " + what + ": " + std::strerror(errno));
  };

  std::error_code ec;
  const fs::path absolute = fs::absolute(file, ec);
  if (ec) throw PluginError(label + ": cannot make the path absolute: " + ec.message());

  // Each step opens one name relative to a directory descriptor that was
  // already checked, never following a link implicitly.
  auto open_root = [&]() {
    Fd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct stat st {};
    if (root.get() < 0 || ::fstat(root.get(), &st) != 0) throw system_error("cannot open /");
    if (const std::string why = distrust(st, Role::passed_directory); !why.empty()) throw refuse("directory / is " + why);
    return root;
  };
  Fd dir = open_root();
  fs::path where = "/";
  std::deque<std::string> remaining;
  push_front(remaining, absolute);
  int links = 0;

  while (!remaining.empty()) {
    const std::string name = remaining.front();
    remaining.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      Fd parent(::openat(dir.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
      struct stat st {};
      if (parent.get() < 0 || ::fstat(parent.get(), &st) != 0) throw system_error("cannot open " + where.string() + "/..");
      where = where.has_relative_path() ? where.parent_path() : where;
      if (const std::string why = distrust(st, Role::passed_directory); !why.empty()) {
        throw refuse("directory " + where.string() + " is " + why);
      }
      dir = std::move(parent);
      continue;
    }
    const fs::path here = where / name;
    Fd next(::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (next.get() < 0 || ::fstat(next.get(), &st) != 0) throw system_error("cannot open " + here.string());

    if (S_ISLNK(st.st_mode)) {
      // The link lives in a checked directory; its target is walked and
      // checked like the rest of the path. Its owner chooses where it
      // points, so the link is ours or root's like everything else we walk
      // (in a sticky directory another user's link would otherwise choose
      // which of our files we load: the kernel's fs.protected_symlinks
      // refuses following such a link for the same reason).
      if (const std::string why = not_ours(st); !why.empty()) {
        throw refuse("symbolic link " + here.string() + " is " + why);
      }
      if (++links > kMaxSymlinks) throw refuse("too many levels of symbolic links");
      std::string target(PATH_MAX, '\0');
      const ssize_t length = ::readlinkat(next.get(), "", target.data(), target.size());
      if (length <= 0 || static_cast<size_t>(length) >= target.size()) {
        throw system_error("cannot read the symbolic link " + here.string());
      }
      target.resize(static_cast<size_t>(length));
      push_front(remaining, target);
      if (fs::path(target).is_absolute()) {
        dir = open_root();
        where = "/";
      }
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (const std::string why = distrust(st, Role::passed_directory); !why.empty()) {
        throw refuse("directory " + here.string() + " is " + why);
      }
      dir = std::move(next);
      where = here;
      continue;
    }
    if (!remaining.empty()) {
      errno = ENOTDIR;
      throw system_error("cannot open " + here.string());
    }
    // The file itself: opened for reading (O_NONBLOCK: a FIFO must not
    // block us), then checked on that very descriptor.
    Fd opened(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (opened.get() < 0 || ::fstat(opened.get(), &st) != 0) throw system_error("cannot open " + here.string());
    if (!S_ISREG(st.st_mode)) throw refuse(here.string() + " is not a regular file");
    struct stat holder {};
    if (::fstat(dir.get(), &holder) != 0) throw system_error("cannot stat " + where.string());
    if (const std::string why = distrust(holder, Role::holding_directory); !why.empty()) {
      throw refuse("directory " + where.string() + " is " + why);
    }
    if (const std::string why = distrust(st, Role::file); !why.empty()) {
      throw refuse(std::string(here == absolute ? "the file" : "the file " + here.string()) + " is " + why);
    }
    return TrustedFile(opened.release(), here);
  }
  throw refuse("names a directory, not a plugin file");
}

TrustedFile::TrustedFile(TrustedFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), resolved_(std::move(other.resolved_)) {}

TrustedFile& TrustedFile::operator=(TrustedFile&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(resolved_, other.resolved_);
  return *this;
}

TrustedFile::~TrustedFile() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace accel::plugin
