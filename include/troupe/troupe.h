// troupe: drive groups of worker processes from one controller.
#pragma once

#include "troupe/cluster.h"
#include "troupe/error.h"
#include "troupe/future.h"
#include "troupe/named_sharding.h"
#include "troupe/resources.h"
#include "troupe/stream.h"
#include "troupe/value.h"
#include "troupe/virtual_cluster.h"
#include "troupe/worker_class.h"
#include "troupe/worker_group.h"

namespace troupe {

// Call first thing in main(), before parsing arguments. In a process that troupe started as an
// agent or a worker (it re-executes the driver's binary), runs that role and exits; in the
// driver it returns at once.
void init(int argc, char** argv);

// Runs this process's troupe role (TROUPE_ROLE=agent or worker, as troupe starts them) and
// returns its exit code, or returns -1 at once when the process has no role. For hosts that embed
// the runtime instead of calling init() from main(), such as the Python package's
// `python -m troupe._role`. Blocks until the role ends.
int run_role();

// The library version, "MAJOR.MINOR.PATCH".
const char* version();

}  // namespace troupe
