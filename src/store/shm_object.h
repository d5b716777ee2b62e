// Store objects: files in a shared-memory directory (default /dev/shm), one per object, named
// "troupe-<owner pid>-<32 hex digits>" (128 random bits). The owner pid is the agent that
// accounts for the object; the random part is the capability: only a process told the name
// (by its driver, over an authenticated connection) can open it. Files are mode 0600.
//
// An object is written once by its creator (create_object), then mapped by any number of readers
// (map_object). Each mapping is private and copy-on-write: the API hands it out as const Bytes,
// and a reader that writes into it anyway (a NumPy array over it in a Python worker) changes
// private copies of those pages, never the object the others see. Creation reserves every page up
// front (posix_fallocate), so a full tmpfs is an Error(kOutOfMemory) at creation, never a SIGBUS on
// a later write or read. Unlinking the file while readers hold mappings is safe: the pages go when
// the last mapping does.
//
// Threads: every function is thread-safe (no shared state); each blocks on file I/O only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/value.h"

namespace troupe::store {

// The directory objects live in: $TROUPE_STORE_DIR when set (tests), else /dev/shm.
std::string store_dir();

// A fresh object name for `owner_pid`: "troupe-<pid>-<32 hex>".
std::string new_object_name(pid_t owner_pid);
// Whether `name` has the form new_object_name makes (no path separators, no dots); names
// received from a peer are checked with this before any file is touched.
bool valid_object_name(const std::string& name);
// The owner pid in a valid name.
pid_t owner_of(const std::string& name);

// Creates the object `name` in `dir` (O_EXCL, 0600), reserves `size` bytes, copies `data` into
// it and returns a (copy-on-write) mapping of it as Bytes (the mapping is unmapped when the last
// copy of the Bytes drops). Throws Error(kOutOfMemory) when the directory has no room (the file is
// removed again), Error(kInvalidArgument) for a bad name, Error(kInternal) for other failures.
Bytes create_object(const std::string& dir, const std::string& name, const uint8_t* data,
                    size_t size);

// Maps the existing object `name` of `dir` (copy-on-write). Throws Error(kInvalidArgument) for a
// bad name, a missing file, or a file whose size is not `size`.
Bytes map_object(const std::string& dir, const std::string& name, size_t size);

// Removes the object's file; false when there was none. Never throws.
bool remove_object(const std::string& dir, const std::string& name);

// Removes the objects of `dir` whose owner pid is not a live process (left by an agent killed
// with SIGKILL); returns how many. Never throws.
size_t sweep_stale(const std::string& dir);
// Removes every object of `dir` owned by `pid` (an agent on its way out); returns how many.
size_t remove_owned_by(const std::string& dir, pid_t pid);
// The names of the objects in `dir` (for tests and status).
std::vector<std::string> list_objects(const std::string& dir);

// The marker that stands for a store object in a call's arguments or result:
//   {"$troupe.object": [name, size]}
// A Value of this shape is replaced by the mapped object on the receiving side.
constexpr const char* kMarkerKey = "$troupe.object";
Value make_marker(const std::string& name, size_t size);
// When `v` is a marker, sets name and size and returns true. Throws Error(kInvalidArgument) for
// a marker with a bad name or size.
bool read_marker(const Value& v, std::string& name, size_t& size);

// Replaces every marker in `v` (recursively through lists and maps) with the mapped object of
// store_dir(). Returns whether there was any. With `remove`, unlinks each file once mapped (a
// result object, which has one reader). Throws like map_object.
bool resolve_markers(Value& v, bool remove = false);

// Replaces every Bytes of at least `threshold` bytes in `v` (recursively) with the marker of a
// new object of store_dir() owned by `owner` holding a copy (a worker's large result). A Bytes
// whose object cannot be created (the store is full) stays as it is. Returns how many it made.
size_t export_large(Value& v, size_t threshold, pid_t owner);

}  // namespace troupe::store
