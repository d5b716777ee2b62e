#include "common/private_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "troupe/error.h"

namespace troupe::fs {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

UniqueFd open_checked(int dir, const std::string& name, bool create, bool fresh,
                      const std::string& path) {
  if (create && ::mkdirat(dir, name.c_str(), 0700) != 0 && (fresh || errno != EEXIST))
    throw Error(ErrorCode::kInvalidArgument,
                "cannot create directory " + path + ": " + std::strerror(errno));
  UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid())
    throw Error(
        ErrorCode::kInvalidArgument,
        "cannot open directory " + path + ": " + std::strerror(errno) +
            (errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a link)" : ""));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    throw Error(ErrorCode::kInvalidArgument, "cannot stat " + path + ": " + std::strerror(errno));
  if (st.st_uid != ::geteuid())
    throw Error(ErrorCode::kInvalidArgument,
                "refusing to use directory " + path + ": it belongs to uid " +
                    std::to_string(st.st_uid) + ", not to this user (uid " +
                    std::to_string(::geteuid()) +
                    "); someone else may control it. Remove it or set TMPDIR elsewhere");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", st.st_mode & 0777);
    throw Error(ErrorCode::kInvalidArgument,
                "refusing to use directory " + path + ": its mode " + mode +
                    " lets group or others in (chmod 700 it, or remove it)");
  }
  return fd;
}

}  // namespace

UniqueFd open_private_dir(const std::string& path, bool create) {
  return open_checked(AT_FDCWD, path, create, false, path);
}

UniqueFd open_private_dir_at(int dir, const std::string& name, bool create,
                             const std::string& path) {
  return open_checked(dir, name, create, false, path);
}

UniqueFd make_fresh_dir_at(int dir, const std::string& name, const std::string& path) {
  return open_checked(dir, name, true, true, path);
}

bool stale_unix_socket(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return false;
  return ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
         errno == ECONNREFUSED;
}

bool valid_component(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 200) return false;
  for (unsigned char c : name)
    if (c == '/' || c < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace troupe::fs
