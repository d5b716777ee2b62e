// The cluster token and the primitives of the authentication handshake.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::token {

// A fresh random token: 64 hex characters (256 bits from getrandom).
std::string generate();
// `n` random bytes.
std::string random_bytes(size_t n);
// Writes `token` to `path`, created with mode 0600 (fails if the file exists or is a symbolic
// link). Throws Error.
void write_file(const std::string& path, const std::string& token);
// Reads a token file (not through a symbolic link); refuses a file readable by group or others.
// Throws Error.
std::string read_file(const std::string& path);
// Reads a token from the descriptor `fd` (a pipe written by the parent) up to a newline or
// end of file, then closes `fd`. Throws Error(kUnauthenticated) when nothing can be read.
std::string read_fd(int fd);
// The token this process was given: TROUPE_TOKEN, else the descriptor named by TROUPE_TOKEN_FD
// (read once, closed, and the variable removed), else the file named by TROUPE_TOKEN_FILE.
// Empty when none is set.
std::string from_environment();
// HMAC-SHA256 of `message` under `key` (32 raw bytes).
std::string hmac_sha256(std::string_view key, std::string_view message);
// Compares in time independent of the contents.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace troupe::token
