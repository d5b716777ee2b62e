#include "common/token.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/launch_env.h"
#include "troupe/error.h"

namespace troupe::token {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::kInternal, std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string generate() {
  static const char kHex[] = "0123456789abcdef";
  std::string raw = random_bytes(32), out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

void write_file(const std::string& path, const std::string& token) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw Error(ErrorCode::kInternal,
                "cannot create token file " + path + ": " + std::strerror(errno));
  ::fchmod(fd, 0600);
  std::string data = token + "\n";
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ::close(fd);
  if (!ok) throw Error(ErrorCode::kInternal, "cannot write token file " + path);
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    throw Error(ErrorCode::kUnauthenticated,
                "cannot read token file " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
    ::close(fd);
    throw Error(ErrorCode::kUnauthenticated,
                "token file " + path + " must not be readable by group or others (chmod 600)");
  }
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  std::string t(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) throw Error(ErrorCode::kUnauthenticated, "token file " + path + " is empty");
  return t;
}

std::string read_fd(int fd) {
  std::string t;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    t.append(buf, static_cast<size_t>(n));
    if (t.find('\n') != std::string::npos || t.size() > 4096) break;
  }
  ::close(fd);
  if (auto nl = t.find('\n'); nl != std::string::npos) t.resize(nl);
  if (t.empty())
    throw Error(ErrorCode::kUnauthenticated,
                "no token on descriptor " + std::to_string(fd) + " (TROUPE_TOKEN_FD)");
  return t;
}

std::string from_environment() {
  if (const char* t = std::getenv(launch_env::kToken); t && *t) return t;
  if (const char* f = std::getenv(launch_env::kTokenFd); f && *f) {
    int fd = std::atoi(f);
    ::unsetenv(launch_env::kTokenFd);
    return read_fd(fd);
  }
  if (const char* f = std::getenv(launch_env::kTokenFile); f && *f) return read_file(f);
  return {};
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace troupe::token
