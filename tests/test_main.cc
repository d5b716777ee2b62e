// Shared main for test binaries: workers re-execute the test binary, so troupe::init must run
// before GoogleTest parses the command line.
#include <gtest/gtest.h>

#include "troupe/troupe.h"

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
