// The C++ half of the cross-language tests (python/tests/test_cross.py):
//   cross_main                      a C++ worker executable (class CppAdder), as agents run it;
//   cross_main drive PYTHON PATHS   a C++ driver whose worker group runs the Python class
//                                   workers.Rank (PYTHON with PATHS, ':'-separated, on sys.path);
//                                   prints "cross ok" and exits 0 when every check passed.
#include <troupe/troupe.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

class CppAdder {
 public:
  explicit CppAdder(int base) : base_(base) {}
  int add(int a, int b) { return base_ + a + b; }
  int64_t size_of(troupe::Bytes data) { return static_cast<int64_t>(data.size()); }
  troupe::Bytes make_bytes(int n) { return troupe::Bytes(std::vector<uint8_t>(n, 7)); }
  std::vector<double> scale(std::vector<double> xs, double k) {
    for (auto& x : xs) x *= k;
    return xs;
  }

 private:
  int base_;
};
TROUPE_WORKER_CLASS(CppAdder, cls) {
  cls.constructor<int>({"base"});
  cls.method("add", &CppAdder::add, {"a", "b"});
  cls.method("size_of", &CppAdder::size_of, {"data"});
  cls.method("make_bytes", &CppAdder::make_bytes, {"n"});
  cls.method("scale", &CppAdder::scale, {"xs", "k"});
}

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "cross FAILED: %s\n", what.c_str());
  return 1;
}

int drive(const std::string& python, const std::string& paths) {
  std::string list;
  std::stringstream in(paths);
  for (std::string p; std::getline(in, p, ':');) list += (list.empty() ? "'" : ", '") + p + "'";
  troupe::ClusterOptions options = troupe::ClusterOptions::local(2, 0, 4);
  options.executables["workers.Rank"] = {
      python,
      {"-c", "import sys; sys.path[:0] = [" + list + "]; from troupe._role import main; main()"},
      {},
      true};  // troupe._role: forked from the host's Python fork server
  options.python_preload = {"fork_preload_mod"};
  troupe::Cluster runtime(options);
  troupe::VirtualClusterOptions vco;
  vco.bundle_ct_per_node_list = {1, 1};
  vco.use_gpus = false;
  troupe::VirtualCluster vc(runtime, vco);
  troupe::WorkerGroupOptions wgo;
  wgo.name_prefix = "py";
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("workers.Rank", {{"tag", "cpp"}}), wgo);
  troupe::ShardedCallOptions how;
  how.in_sharded_axes = {"dp"};
  how.common_kwargs = {{"c", troupe::Bytes::copy_of("blob")}};
  auto f = group.run_all_workers_sharded_data("who", {{"x", troupe::Array{10, 20}}}, how);
  std::vector<troupe::Value> results = group.get_all_worker_results(f);
  if (results.size() != 2) return fail("expected 2 results");
  for (int r = 0; r < 2; ++r) {
    const troupe::Value* rank = results[r].find("rank");
    const troupe::Value* x = results[r].find("x");
    if (!rank || !x || rank->as<int>() != r || x->as<int>() != 10 * (r + 1))
      return fail("result " + std::to_string(r) + ": " + results[r].debug_string());
    // A Bytes argument arrives in Python as a uint8 array and comes back tagged "ndarray".
    const troupe::Value* c = results[r].find("c");
    const troupe::Value* data = c ? c->find("data") : nullptr;
    if (!data || !data->is_bytes() || data->as_bytes().view() != "blob")
      return fail("bytes round trip: " + results[r].debug_string());
  }
  try {
    group.run_single_worker_single_data("fail", 0, {{"message", "boom"}}).get();
    return fail("no error from fail()");
  } catch (const troupe::Error& e) {
    if (e.code() != troupe::ErrorCode::kMethodFailed ||
        e.message().find("ValueError: boom") == std::string::npos)
      return fail(std::string("wrong error: ") + e.what());
  }
  // Forked, with ClusterOptions::python_preload imported before the class module.
  troupe::Value forked =
      group.run_single_worker_single_data("forked_with", 1, {{"module", "fork_preload_mod"}}).get();
  if (forked.debug_string() != troupe::Value(troupe::Array{true, true}).debug_string())
    return fail("python_preload: " + forked.debug_string());
  group.shutdown();
  std::printf("cross ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  if (argc == 4 && std::string(argv[1]) == "drive") {
    try {
      return drive(argv[2], argv[3]);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }
  std::fprintf(stderr, "usage: %s drive PYTHON PATHS (or run by a troupe agent)\n", argv[0]);
  return 2;
}
