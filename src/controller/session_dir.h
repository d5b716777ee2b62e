// The driver's session directory: where logs, the token file and the sockets of one cluster
// live, and the pruning of sessions whose cluster is gone.
//
// Layout (default): $TMPDIR/troupe-<uid>/session-<time>-<pid>-<n>/ with logs/, sockets/, token
// (mode 0600, removed at clean shutdown) and owner ("<pid> <start time>" of the driver). The
// base $TMPDIR/troupe-<uid> is created with mode 0700 and refused when it belongs to someone
// else or is open to group or others. The sockets go to a directory of this user in memory,
// /dev/shm/troupe-<uid>/session-<pid>-<time>-<n>.sockets, when /dev/shm is a writable tmpfs (no
// disk inode per worker); else to session/sockets/, or, when that would make a socket path
// longer than a Unix socket allows (108 bytes), to the same short name under /tmp. A directory
// other than session/sockets/ is named in the session's socket_dir file.
#pragma once

#include <string>
#include <vector>

namespace troupe::internal {

struct SessionPaths {
  std::string dir;         // the session directory
  std::string socket_dir;  // the head's, agents' and workers' sockets
};

// How many sessions of clusters that are gone are kept (for their logs) when a new one starts.
constexpr size_t kSessionsKept = 5;

// Creates a fresh session directory (at `requested` when not empty, else the default), its
// logs/ and its socket directory, all mode 0700, and records this process as the owner.
// `host_names` are checked to fit in socket paths. Throws Error(kInvalidArgument) naming the
// directory and the problem. Prunes the default base's gone sessions (all but the newest
// kSessionsKept) when the default is used.
SessionPaths create_session(const std::string& requested,
                            const std::vector<std::string>& host_names);

// Writes the token file of the session (mode 0600, relative to the session directory, never
// through a link; it must not exist). Throws Error.
void write_token_file(const SessionPaths& paths, const std::string& token);
// Removes the session's token file (clean shutdown). Does nothing when there is none.
void remove_token_file(const SessionPaths& paths);

// The directory holding the sockets of the session `dir` (as create_session chose it).
std::string socket_dir_of(const std::string& dir);

}  // namespace troupe::internal
