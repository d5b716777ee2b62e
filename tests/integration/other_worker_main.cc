// (being written)
#include "troupe/troupe.h"
int main(int argc, char** argv) {
  troupe::init(argc, argv);
  return 0;
}
