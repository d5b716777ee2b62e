#include "troupe/error.h"

#include <array>
#include <utility>

namespace troupe {
namespace {
constexpr std::array<std::pair<ErrorCode, const char*>, 17> kNames = {{
    {ErrorCode::kOk, "ok"},
    {ErrorCode::kInvalidArgument, "invalid_argument"},
    {ErrorCode::kUnknownClass, "unknown_class"},
    {ErrorCode::kUnknownMethod, "unknown_method"},
    {ErrorCode::kMethodFailed, "method_failed"},
    {ErrorCode::kConstructorFailed, "constructor_failed"},
    {ErrorCode::kWorkerDied, "worker_died"},
    {ErrorCode::kConnectionLost, "connection_lost"},
    {ErrorCode::kTimeout, "timeout"},
    {ErrorCode::kProtocol, "protocol_error"},
    {ErrorCode::kUnauthenticated, "unauthenticated"},
    {ErrorCode::kExecutableNotFound, "executable_not_found"},
    {ErrorCode::kResourceUnavailable, "resource_unavailable"},
    {ErrorCode::kShutdown, "shutdown"},
    {ErrorCode::kHostLost, "host_lost"},
    {ErrorCode::kInternal, "internal"},
    {ErrorCode::kOutOfMemory, "out_of_memory"},
}};
}  // namespace

const char* error_code_name(ErrorCode code) {
  for (const auto& [c, name] : kNames)
    if (c == code) return name;
  return "internal";
}

ErrorCode error_code_from_name(const std::string& name) {
  for (const auto& [c, n] : kNames)
    if (name == n) return c;
  return ErrorCode::kInternal;
}

}  // namespace troupe
