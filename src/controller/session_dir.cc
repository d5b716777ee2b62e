#include "controller/session_dir.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/env.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/process.h"
#include "troupe/error.h"

namespace troupe::internal {
namespace {

namespace stdfs = std::filesystem;

constexpr size_t kMaxSocketPath = 107;  // sun_path is 108 bytes with the terminating NUL
constexpr const char* kSocketDirFile = "socket_dir";

constexpr const char* kMemoryDir = "/dev/shm";

bool on_tmpfs(const char* dir) {
  struct statfs fs {};
  return ::statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC && ::access(dir, W_OK) == 0;
}

std::string user_base(const std::string& tmp) {
  return tmp + "/troupe-" + std::to_string(::geteuid());
}

// The longest socket path the session will use in `dir`.
size_t longest_socket_path(const std::string& dir, const std::vector<std::string>& hosts) {
  size_t longest = dir.size() + std::strlen("/head.sock");
  for (const auto& h : hosts)
    longest = std::max({longest, dir.size() + 7 + h.size() + 5,    // /agent-H.sock
                        dir.size() + 1 + h.size() + 2 + 10 + 5});  // /H-wNNNNNNNNNN.sock
  return longest;
}

// Writes `content` to a new file `name` in `dir` (mode 0600, never through a link).
void write_new_file(int dir, const std::string& name, const std::string& content,
                    const std::string& path) {
  fs::UniqueFd fd(
      ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid() ||
      ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    throw Error(ErrorCode::kInvalidArgument, "cannot write " + path + ": " + std::strerror(errno));
}

std::string read_small_file(const std::string& path) {
  fs::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return {};
  char buf[4096];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// True when something accepts connections on the Unix socket `path`.
bool socket_listening(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fs::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return s.valid() && ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// True while the cluster of the session `dir` may still run: its owner (pid and start time)
// runs, or, for a session without an owner file, its head socket accepts connections.
bool session_alive(const std::string& dir) {
  std::string owner = read_small_file(dir + "/owner");
  if (owner.empty()) {
    // Written by an older troupe, or being created right now: gone only when no head listens
    // and it was not touched for a minute.
    std::error_code ec;
    auto age = stdfs::file_time_type::clock::now() - stdfs::last_write_time(dir, ec);
    return ec || age < std::chrono::minutes(1) ||
           socket_listening(socket_dir_of(dir) + "/head.sock");
  }
  long long pid = 0;
  unsigned long long start = 0;
  if (std::sscanf(owner.c_str(), "%lld %llu", &pid, &start) != 2) return false;
  auto now = process::start_time(static_cast<pid_t>(pid));
  return now && *now == start;
}

// Removes every session of `base` whose cluster is gone, but the newest kSessionsKept of them.
void prune(const std::string& base) {
  std::error_code ec;
  std::vector<std::pair<stdfs::file_time_type, stdfs::path>> gone;
  for (const auto& e : stdfs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("session-", 0) != 0 || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".sockets") == 0) continue;
    if (session_alive(e.path().string())) continue;
    gone.emplace_back(stdfs::last_write_time(e.path(), ec), e.path());
  }
  if (gone.size() <= kSessionsKept) return;
  std::sort(gone.begin(), gone.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = kSessionsKept; i < gone.size(); ++i) {
    std::string sockets = read_small_file(gone[i].second.string() + "/" + kSocketDirFile);
    if (!sockets.empty() && sockets.find("/troupe-") != std::string::npos)
      stdfs::remove_all(sockets, ec);
    stdfs::remove_all(gone[i].second, ec);
  }
}

}  // namespace

std::string socket_dir_of(const std::string& dir) {
  std::string other = read_small_file(dir + "/" + kSocketDirFile);
  return other.empty() ? dir + "/sockets" : other;
}

SessionPaths create_session(const std::string& requested,
                            const std::vector<std::string>& host_names) {
  for (const auto& h : host_names)
    if (!fs::valid_component(h))
      throw Error(ErrorCode::kInvalidArgument,
                  "bad host name '" + h +
                      "': it names sockets, so it must not be '.', '..' or "
                      "hold '/' or control characters");
  SessionPaths out;
  fs::UniqueFd session;
  std::string base;
  if (requested.empty()) {
    base = user_base(env::get_or("TMPDIR", "/tmp"));
    fs::UniqueFd base_fd = fs::open_private_dir(base, true);
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    static int counter = 0;
    std::string name;
    for (int attempt = 0;; ++attempt) {
      name = std::string("session-") + stamp + "-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++);
      if (::mkdirat(base_fd.get(), name.c_str(), 0700) == 0) break;
      if (errno != EEXIST || attempt > 100)
        throw Error(ErrorCode::kInvalidArgument,
                    "cannot create " + base + "/" + name + ": " + std::strerror(errno));
    }
    out.dir = base + "/" + name;
    session = fs::open_private_dir_at(base_fd.get(), name, false, out.dir);
  } else {
    out.dir = requested;
    std::error_code ec;
    stdfs::path parent = stdfs::path(requested).parent_path();
    if (!parent.empty()) stdfs::create_directories(parent, ec);
    session = fs::open_private_dir(requested, true);
  }
  fs::open_private_dir_at(session.get(), "logs", true, out.dir + "/logs");
  auto owner = process::start_time(::getpid());
  // A session directory given again by the user: its old owner and socket_dir go.
  ::unlinkat(session.get(), "owner", 0);
  ::unlinkat(session.get(), kSocketDirFile, 0);
  write_new_file(session.get(), "owner",
                 std::to_string(::getpid()) + " " + std::to_string(owner.value_or(0)) + "\n",
                 out.dir + "/owner");

  out.socket_dir = out.dir + "/sockets";
  const bool memory_fs = on_tmpfs(kMemoryDir);
  if (memory_fs || longest_socket_path(out.socket_dir, host_names) > kMaxSocketPath) {
    // A directory of this user in memory (a socket per worker costs a disk inode allocation
    // otherwise: 12 % of the CPU of starting 10,000 workers on ext4), else under /tmp, short
    // enough for a Unix socket's path.
    std::string short_base = user_base(memory_fs ? kMemoryDir : "/tmp");
    fs::UniqueFd short_fd = fs::open_private_dir(short_base, true);
    static int sockets_counter = 0;
    std::string name = "session-" + std::to_string(::getpid()) + "-" +
                       std::to_string(std::time(nullptr)) + "-" +
                       std::to_string(sockets_counter++) + ".sockets";
    out.socket_dir = short_base + "/" + name;
    fs::make_fresh_dir_at(short_fd.get(), name, out.socket_dir);
    write_new_file(session.get(), kSocketDirFile, out.socket_dir, out.dir + "/" + kSocketDirFile);
    if (longest_socket_path(out.socket_dir, host_names) > kMaxSocketPath)
      throw Error(ErrorCode::kInvalidArgument,
                  "host names are too long for Unix socket paths (108 bytes) even in " +
                      out.socket_dir + "; use shorter host names");
  } else {
    fs::open_private_dir_at(session.get(), "sockets", true, out.socket_dir);
  }
  if (!base.empty()) prune(base);
  return out;
}

void write_token_file(const SessionPaths& paths, const std::string& token) {
  fs::UniqueFd session = fs::open_private_dir(paths.dir, false);
  write_new_file(session.get(), "token", token + "\n", paths.dir + "/token");
}

void remove_token_file(const SessionPaths& paths) { ::unlink((paths.dir + "/token").c_str()); }

}  // namespace troupe::internal
