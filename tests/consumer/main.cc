// Smallest program built against an installed troupe: checks that the public headers, the
// library and its dependencies are found through find_package(troupe).
#include <cstdio>

#include "troupe/troupe.h"

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  std::printf("troupe consumer: version %s\n", troupe::version());
  return 0;
}
