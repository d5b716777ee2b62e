// The public worker-class registry (troupe/worker_class.h) as a language binding uses it:
// classes registered at run time, a resolver for names nobody registered, and the list of names.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "troupe/worker_class.h"

namespace troupe {
namespace {

WorkerClassInfo class_named(const std::string& name) {
  WorkerClassInfo info;
  info.name = name;
  info.construct = [](const Map&, const std::string&) { return std::make_shared<int>(5); };
  WorkerMethodInfo m;
  m.name = "five";
  m.invoke = [](void* object, const Map&, const std::string&, StreamWriter*) {
    return Value(int64_t{*static_cast<int*>(object)});
  };
  info.methods[m.name] = m;
  return info;
}

TEST(WorkerClassRegistryTest, RegisteredAndResolvedClassesAreFoundByName) {
  register_worker_class(class_named("registry_test.Registered"));
  const WorkerClassInfo* found = find_worker_class("registry_test.Registered");
  ASSERT_NE(found, nullptr);
  auto object = found->construct({}, "test");
  EXPECT_EQ(found->methods.at("five").invoke(object.get(), {}, "test", nullptr).as<int64_t>(), 5);

  std::atomic<int> asked{0};
  set_worker_class_resolver([&](const std::string& name) -> std::optional<WorkerClassInfo> {
    ++asked;
    if (name == "registry_test.Unloadable")
      throw Error(ErrorCode::kUnknownClass, "cannot import registry_test");
    if (name != "registry_test.Resolved") return std::nullopt;
    return class_named("ignored: the registry names it");
  });
  EXPECT_EQ(find_worker_class("registry_test.Nobody"), nullptr);
  const WorkerClassInfo* resolved = find_worker_class("registry_test.Resolved");
  ASSERT_NE(resolved, nullptr);
  EXPECT_EQ(resolved->name, "registry_test.Resolved");
  // Resolved once, then registered: the resolver is not asked again.
  EXPECT_EQ(find_worker_class("registry_test.Resolved"), resolved);
  EXPECT_EQ(asked.load(), 2);
  EXPECT_THROW(find_worker_class("registry_test.Unloadable"), Error);

  auto names = registered_worker_class_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "registry_test.Registered"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "registry_test.Resolved"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "registry_test.Nobody"), names.end());
  set_worker_class_resolver(nullptr);
}

}  // namespace
}  // namespace troupe
