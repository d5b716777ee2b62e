#include "store/shm_object.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "common/launch_env.h"

namespace troupe::store {
namespace {

constexpr const char* kPrefix = "troupe-";

// Owns one private mapping of an object (copy-on-write: see shm_object.h).
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && addr != MAP_FAILED) ::munmap(addr, size);
  }
};

Bytes wrap_mapping(int fd, size_t size) {
  auto m = std::make_shared<Mapping>();
  m->size = size;
  if (size == 0) return Bytes(m, nullptr, 0);
  m->addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (m->addr == MAP_FAILED)
    throw Error(ErrorCode::kInternal,
                std::string("mmap of a store object: ") + std::strerror(errno));
  const auto* data = static_cast<const uint8_t*>(m->addr);
  return Bytes(std::shared_ptr<const void>(m, m->addr), data, size);
}

std::string path_of(const std::string& dir, const std::string& name) {
  if (!valid_object_name(name))
    throw Error(ErrorCode::kInvalidArgument, "bad store object name '" + name + "'");
  return dir + "/" + name;
}

}  // namespace

std::string store_dir() { return env::get_or(launch_env::kStoreDir, "/dev/shm"); }

std::string new_object_name(pid_t owner_pid) {
  uint8_t r[16];
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = ::getrandom(r + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kInternal, "getrandom failed");
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string name = kPrefix + std::to_string(owner_pid) + "-";
  for (uint8_t b : r) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

bool valid_object_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return false;
  size_t i = std::strlen(kPrefix), digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++digits;
  if (digits == 0 || digits > 10 || i >= name.size() || name[i] != '-') return false;
  ++i;
  if (name.size() - i != 32) return false;
  for (; i < name.size(); ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return true;
}

pid_t owner_of(const std::string& name) {
  return static_cast<pid_t>(std::stol(name.substr(std::strlen(kPrefix))));
}

Bytes create_object(const std::string& dir, const std::string& name, const uint8_t* data,
                    size_t size) {
  std::string path = path_of(dir, name);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(ErrorCode::kInternal,
                "cannot create store object " + path + ": " + std::strerror(errno));
  auto fail = [&](ErrorCode code, const std::string& what, int err) {
    ::close(fd);
    ::unlink(path.c_str());
    return Error(code, what + " " + path + ": " + std::strerror(err));
  };
  if (size > 0) {
    int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (err != 0)
      throw fail(err == ENOSPC ? ErrorCode::kOutOfMemory : ErrorCode::kInternal,
                 "cannot reserve " + std::to_string(size) + " bytes for store object", err);
    // write(2), not a writable mapping: the pages are the file's, never counted in the
    // writer's resident memory (a driver's peak RSS does not grow by the object).
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd, data + done, std::min<size_t>(size - done, size_t{1} << 30),
                           static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw fail(ErrorCode::kInternal, "cannot write store object", n < 0 ? errno : EIO);
      done += static_cast<size_t>(n);
    }
  }
  try {
    Bytes out = wrap_mapping(fd, size);
    ::close(fd);
    return out;
  } catch (const Error& e) {
    throw fail(ErrorCode::kInternal, e.message(), errno);
  }
}

Bytes map_object(const std::string& dir, const std::string& name, size_t size) {
  std::string path = path_of(dir, name);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "store object " + name + " cannot be opened: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) != size) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument,
                "store object " + name + " is not a file of " + std::to_string(size) + " bytes");
  }
  try {
    Bytes out = wrap_mapping(fd, size);
    ::close(fd);
    return out;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

bool remove_object(const std::string& dir, const std::string& name) {
  if (!valid_object_name(name)) return false;
  return ::unlink((dir + "/" + name).c_str()) == 0;
}

std::vector<std::string> list_objects(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (valid_object_name(n)) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

size_t sweep_stale(const std::string& dir) {
  size_t n = 0;
  for (const auto& name : list_objects(dir)) {
    pid_t pid = owner_of(name);
    if (pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM)) continue;  // alive
    if (remove_object(dir, name)) ++n;
  }
  return n;
}

size_t remove_owned_by(const std::string& dir, pid_t pid) {
  size_t n = 0;
  for (const auto& name : list_objects(dir))
    if (owner_of(name) == pid && remove_object(dir, name)) ++n;
  return n;
}

Value make_marker(const std::string& name, size_t size) {
  return Map{{kMarkerKey, Array{Value(name), Value(static_cast<int64_t>(size))}}};
}

bool read_marker(const Value& v, std::string& name, size_t& size) {
  if (!v.is_map() || v.as_map().size() != 1 || v.as_map()[0].first != kMarkerKey) return false;
  const Value& body = v.as_map()[0].second;
  if (!body.is_array() || body.as_array().size() != 2 || !body.as_array()[0].is_string() ||
      !body.as_array()[1].is_int() || body.as_array()[1].as_int() < 0)
    throw Error(ErrorCode::kInvalidArgument, "malformed store object reference");
  name = body.as_array()[0].as_string();
  if (!valid_object_name(name))
    throw Error(ErrorCode::kInvalidArgument, "bad store object name '" + name + "'");
  size = static_cast<size_t>(body.as_array()[1].as_int());
  return true;
}

bool resolve_markers(Value& v, bool remove) {
  if (v.is_array()) {
    bool any = false;
    for (auto& e : v.as_array()) any |= resolve_markers(e, remove);
    return any;
  }
  if (!v.is_map()) return false;
  std::string name;
  size_t size = 0;
  if (read_marker(v, name, size)) {
    std::string dir = store_dir();
    try {
      v = Value(map_object(dir, name, size));
    } catch (...) {
      if (remove) remove_object(dir, name);
      throw;
    }
    if (remove) remove_object(dir, name);
    return true;
  }
  bool any = false;
  for (auto& [k, e] : v.as_map()) any |= resolve_markers(e, remove);
  return any;
}

size_t export_large(Value& v, size_t threshold, pid_t owner) {
  if (v.is_array()) {
    size_t n = 0;
    for (auto& e : v.as_array()) n += export_large(e, threshold, owner);
    return n;
  }
  if (v.is_map()) {
    size_t n = 0;
    for (auto& [k, e] : v.as_map()) n += export_large(e, threshold, owner);
    return n;
  }
  if (!v.is_bytes() || v.as_bytes().size() < threshold) return 0;
  const Bytes& b = v.as_bytes();
  try {
    std::string name = new_object_name(owner);
    create_object(store_dir(), name, b.data(), b.size());
    v = make_marker(name, b.size());
    return 1;
  } catch (const Error&) {
    return 0;  // sent as an attachment instead
  }
}

}  // namespace troupe::store
