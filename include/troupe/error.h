// Errors that cross process boundaries. Every failure a caller can see is a troupe::Error: a
// code that programs branch on plus a message that names the worker, method and cause.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace troupe {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,      // missing, extra or mistyped argument; bad option
  kUnknownClass,         // no worker class registered under that name
  kUnknownMethod,        // the worker class has no such method
  kMethodFailed,         // the worker method threw; message carries what() text
  kConstructorFailed,    // the worker's constructor threw
  kWorkerDied,           // the worker process or its host is gone
  kConnectionLost,       // the connection closed without a known death
  kTimeout,              // a deadline passed
  kProtocol,             // a malformed or oversized frame
  kUnauthenticated,      // the peer did not prove the cluster token
  kExecutableNotFound,   // the worker executable could not be started
  kResourceUnavailable,  // not enough CPUs, GPUs, hosts or ports
  kShutdown,             // the cluster or worker was shut down
  kHostLost,             // the worker's host stopped answering (heartbeats) or was cut off
  kInternal,
  kOutOfMemory,  // the object store of a host has no room (requested, used, capacity named)
};

// Stable lower-case name of a code ("worker_died"); used on the wire and in messages.
const char* error_code_name(ErrorCode code);
// Inverse of error_code_name; unknown names map to kInternal.
ErrorCode error_code_from_name(const std::string& name);

// The exception thrown by Future::get and by blocking controller calls.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
        code_(code),
        message_(message) {}

  ErrorCode code() const { return code_; }
  // The message without the code prefix.
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

}  // namespace troupe
