#include "common/call_status.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "troupe/error.h"

namespace troupe::call_status {
namespace {

constexpr uint32_t kMagic = 0x74637331;  // "tcs1"

struct Page {
  std::atomic<uint32_t> magic;
  std::atomic<uint32_t> method_len;
  std::atomic<uint64_t> seq;  // CS-2
  std::atomic<int64_t> pid;
  std::atomic<int64_t> start_ns;
  std::atomic<int64_t> calls;
  char method[kMaxMethod];
};
static_assert(sizeof(Page) <= kPageBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

Page* page = nullptr;  // the worker's mapping; set once by open()

int64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // CS-3
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Error io_error(const std::string& what, const std::string& path) {
  return Error(ErrorCode::kInternal,
               "call-status page " + path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

void open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw io_error("cannot create", path);
  void* mem = nullptr;
  if (::ftruncate(fd, kPageBytes) == 0)
    mem = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (!mem || mem == MAP_FAILED) throw io_error("cannot map", path);
  Page* p = static_cast<Page*>(mem);
  p->pid.store(::getpid(), std::memory_order_relaxed);
  p->magic.store(kMagic, std::memory_order_release);
  page = p;
}

void begin(std::string_view method) {
  Page* p = page;
  if (!p) return;
  const uint64_t s = p->seq.load(std::memory_order_relaxed);
  p->seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const size_t n = std::min(method.size(), kMaxMethod);
  std::memcpy(p->method, method.data(), n);
  p->method_len.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
  p->start_ns.store(monotonic_ns(), std::memory_order_relaxed);
  p->calls.store(p->calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  p->seq.store(s + 2, std::memory_order_release);
}

void end() {
  Page* p = page;
  if (!p) return;
  const uint64_t s = p->seq.load(std::memory_order_relaxed);
  p->seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  p->method_len.store(0, std::memory_order_relaxed);
  p->seq.store(s + 2, std::memory_order_release);
}

std::optional<Snapshot> read(int dir_fd, const std::string& name, std::string& why) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    why = std::string("no call-status page: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st;
  void* mem = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(kPageBytes))
    mem = ::mmap(nullptr, kPageBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) {
    why = "the worker has not mapped its call-status page (it is still starting)";
    return std::nullopt;
  }
  const Page* p = static_cast<const Page*>(mem);
  std::optional<Snapshot> out;
  why = "the worker has not written its call-status page";
  for (int attempt = 0; attempt < 100 && p->magic.load(std::memory_order_acquire) == kMagic;
       ++attempt) {
    const uint64_t s1 = p->seq.load(std::memory_order_acquire);
    Snapshot snap;
    snap.pid = p->pid.load(std::memory_order_relaxed);
    const size_t n = std::min<size_t>(p->method_len.load(std::memory_order_relaxed), kMaxMethod);
    snap.method.assign(p->method, n);
    const int64_t start = p->start_ns.load(std::memory_order_relaxed);
    snap.calls = p->calls.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s1 % 2 == 0 && p->seq.load(std::memory_order_relaxed) == s1) {
      snap.call_ns = snap.method.empty() ? 0 : std::max<int64_t>(0, monotonic_ns() - start);
      out = std::move(snap);
      break;
    }
    why = "the call-status page stayed busy";
  }
  ::munmap(mem, kPageBytes);
  return out;
}

}  // namespace troupe::call_status
