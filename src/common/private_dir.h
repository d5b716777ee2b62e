// Directories that only this user can steer: the session directory and what lives in it.
//
// Every function opens with O_NOFOLLOW relative to a directory descriptor, so that a symbolic
// link planted by someone else is never followed, and checks that what it opened belongs to
// this user and is closed to group and others. Errors are troupe::Error naming the path.
#pragma once

#include <sys/types.h>

#include <string>

namespace troupe::fs {

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Opens the directory `path` (absolute or relative to the working directory), creating it with
// mode 0700 when it is missing and `create` is set (its parents must exist). The last component
// must not be a symbolic link. Throws Error(kInvalidArgument) when the directory is not owned by
// this user or is open to group or others (mode & 077), naming the path and what to do.
UniqueFd open_private_dir(const std::string& path, bool create);
// The same for the entry `name` of the directory `dir` (`path` names it in errors).
UniqueFd open_private_dir_at(int dir, const std::string& name, bool create,
                             const std::string& path);
// Like open_private_dir_at with create, but the directory must not exist yet (EEXIST is an
// error): a fresh directory that no one else can have prepared.
UniqueFd make_fresh_dir_at(int dir, const std::string& name, const std::string& path);

// True when `path` is a Unix socket on which nothing listens any more (connect is refused):
// what a process killed with SIGKILL leaves behind.
bool stale_unix_socket(const std::string& path);

// True when `name` is usable as one path component: not empty, not "." or "..", no '/', no
// control character, at most 200 bytes.
bool valid_component(const std::string& name);

}  // namespace troupe::fs
