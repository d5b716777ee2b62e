// A C++ driver of the standing cluster at TROUPE_ADDRESS, for python/tests/test_ray_shared_book.py
// (a C++ driver and a Python one competing for GPUs): books ARGV[1] GPUs of one host through a
// virtual cluster that waits for them (VirtualClusterOptions::wait_for_resources), prints
// "placed GPUs <ids>" once it has them, and holds them until its stdin closes; then it exits,
// which frees them. Exit code 1 (with the error on stderr) when they were not placed.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "troupe/troupe.h"

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  int gpus = argc > 1 ? std::atoi(argv[1]) : 1;
  try {
    troupe::ClusterOptions options;  // TROUPE_ADDRESS: the standing head
    options.log_to_driver = false;
    troupe::Cluster cluster(options);
    troupe::VirtualClusterOptions vo;
    vo.name = "cpp-driver";
    vo.bundle_ct_per_node_list = {static_cast<size_t>(gpus)};
    vo.use_gpus = true;
    vo.num_gpus_per_node = gpus;
    vo.cpus_per_bundle = 0;
    vo.wait_for_resources = true;
    vo.creation_timeout = std::chrono::seconds(60);
    troupe::VirtualCluster vc(cluster, vo);
    std::string ids;
    for (const auto& b : vc.get_placement_groups().at(0).bundles)
      for (int g : b.gpu_ids) ids += " " + std::to_string(g);
    std::printf("placed GPUs%s\n", ids.c_str());
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line)) {
    }
  } catch (const troupe::Error& e) {
    std::fprintf(stderr, "book_gpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
