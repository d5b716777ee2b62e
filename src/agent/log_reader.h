// Reading a worker's log file for read_log (wire/control.h), in pieces of bounded size.
//
// Any thread; no state. Memory: one piece allocates at most request.max_bytes (<=
// ReadLog::kMaxBytes), whatever the file's size or the request's offset and tail_lines.
#pragma once

#include <cstdint>
#include <string>

#include "wire/control.h"

namespace troupe::agent {

struct LogPiece {
  int64_t offset = 0;       // where `data` starts in the file
  int64_t next_offset = 0;  // where the next piece starts
  int64_t size = 0;         // of the file when read
  std::string data;
};

// Reads `file` in the directory `dir_fd`, never following a symbolic link, as `request` asks
// (its name is not used): with tail_lines > 0 the last tail_lines lines found within the file's
// last max_bytes; otherwise up to max_bytes from request.offset (none past the end). A piece
// ends at the end of a line when the bytes it may hold contain one. Throws
// Error(kInvalidArgument) naming `shown_path` when the file cannot be opened or read.
LogPiece read_log_piece(int dir_fd, const std::string& file, const std::string& shown_path,
                        const wire::control::ReadLog& request);

}  // namespace troupe::agent
