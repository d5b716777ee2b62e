#include "agent/log_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/private_dir.h"

namespace troupe::agent {
namespace {

Error cannot(const std::string& what, const std::string& shown_path) {
  return Error(ErrorCode::kInvalidArgument,
               "cannot " + what + " log file " + shown_path + ": " + std::strerror(errno));
}

// Exactly `length` bytes from `offset` (fewer only when the file ended meanwhile).
std::string read_at(int fd, int64_t offset, int64_t length, const std::string& shown_path) {
  std::string out(static_cast<size_t>(length), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                        static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw cannot("read", shown_path);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

// Where the last `lines` lines of `window` start; when it holds fewer, the first whole line
// (0 when the window is the file's beginning).
size_t tail_start(const std::string& window, int64_t lines, bool at_file_start) {
  size_t end = window.size();
  if (end > 0 && window[end - 1] == '\n') --end;  // the last line's own end
  int64_t found = 0;
  for (size_t i = end; i > 0; --i)
    if (window[i - 1] == '\n' && ++found == lines) return i;
  if (at_file_start) return 0;
  size_t first = window.find('\n');
  return first == std::string::npos ? window.size() : first + 1;
}

}  // namespace

LogPiece read_log_piece(int dir_fd, const std::string& file, const std::string& shown_path,
                        const wire::control::ReadLog& request) {
  fs::UniqueFd fd(::openat(dir_fd, file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) throw cannot("open", shown_path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw cannot("read", shown_path);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::kInvalidArgument, "log file " + shown_path + " is not a regular file");
  const int64_t size = st.st_size;
  const int64_t max_bytes =
      std::clamp<int64_t>(request.max_bytes, 1, wire::control::ReadLog::kMaxBytes);
  LogPiece piece;
  piece.size = size;
  if (request.tail_lines > 0) {
    const int64_t start = std::max<int64_t>(0, size - max_bytes);
    std::string window = read_at(fd.get(), start, size - start, shown_path);
    size_t from = tail_start(window, request.tail_lines, start == 0);
    piece.offset = start + static_cast<int64_t>(from);
    piece.data = window.substr(from);
  } else {
    const int64_t start = std::min(std::max<int64_t>(0, request.offset), size);
    piece.offset = start;
    piece.data = read_at(fd.get(), start, std::min(max_bytes, size - start), shown_path);
    // Cut after the last whole line, unless that leaves nothing (one line longer than the piece).
    if (start + static_cast<int64_t>(piece.data.size()) < size) {
      size_t last = piece.data.rfind('\n');
      if (last != std::string::npos) piece.data.resize(last + 1);
    }
  }
  piece.next_offset = piece.offset + static_cast<int64_t>(piece.data.size());
  return piece;
}

}  // namespace troupe::agent
