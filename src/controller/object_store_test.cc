// DriverStore over FakeAgentClient (tests/fake_agent_client.h), objects in a private temporary
// directory (TROUPE_STORE_DIR): put() reserves through the agent and writes the file once;
// prepare() turns ObjectRefs and Bytes over the threshold into markers and pins them; the last
// drop removes the file and frees the reservation (OS-1); a full store is kOutOfMemory;
// shutdown() removes what is still referenced.
#include "controller/object_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "fake_agent_client.h"
#include "store/shm_object.h"

namespace troupe::internal {
namespace {

class DriverStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/troupe-driver-store-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::setenv("TROUPE_STORE_DIR", dir_.c_str(), 1);
    agent_ = std::make_shared<troupe_test::FakeAgentClient>(0, "fake", AgentEvents{});
  }
  void TearDown() override {
    ::unsetenv("TROUPE_STORE_DIR");
    std::filesystem::remove_all(dir_);
  }
  bool exists(const std::string& name) const {
    struct stat st;
    return ::stat((dir_ + "/" + name).c_str(), &st) == 0;
  }
  std::string dir_;
  std::shared_ptr<troupe_test::FakeAgentClient> agent_;
};

TEST_F(DriverStoreTest, PutWritesOnceAndTheLastDropFrees) {
  DriverStore store(agent_, 1024);
  Bytes data(std::vector<uint8_t>(4096, 9));
  ObjectRef ref = store.put(data);
  ASSERT_FALSE(ref.name().empty());
  EXPECT_TRUE(exists(ref.name()));
  EXPECT_EQ(ref.bytes(), data);
  EXPECT_NE(ref.bytes().data(), data.data());  // the store's mapping, not the caller's buffer
  EXPECT_EQ(agent_->store_objects().size(), 1u);
  const std::string name = ref.name();
  Bytes view = ref.bytes();
  ref = ObjectRef();
  EXPECT_TRUE(exists(name)) << "a Bytes of the object still holds it";
  view = Bytes();
  EXPECT_FALSE(exists(name));
  EXPECT_TRUE(agent_->store_objects().empty());
}

TEST_F(DriverStoreTest, PrepareMarksRefsAndLargeBytesAndPinsThem) {
  DriverStore store(agent_, 1024);
  ObjectRef ref = store.put(Bytes::copy_of("small but stored"));
  Map kwargs{{"ref", ref},
             {"big", Bytes(std::vector<uint8_t>(2048, 1))},
             {"small", Bytes::copy_of("tiny")},
             {"nested", Array{Value(ref), 3}}};
  Map out;
  std::vector<Bytes> pins;
  ASSERT_TRUE(store.prepare(kwargs, out, pins));
  std::string name;
  size_t size = 0;
  ASSERT_TRUE(store::read_marker(out[0].second, name, size));
  EXPECT_EQ(name, ref.name());
  ASSERT_TRUE(store::read_marker(out[1].second, name, size));
  EXPECT_EQ(size, 2048u);
  EXPECT_TRUE(exists(name));
  EXPECT_TRUE(out[2].second.is_bytes());
  EXPECT_TRUE(store::read_marker(out[3].second.as_array()[0], name, size));
  EXPECT_EQ(agent_->store_objects().size(), 2u);
  // The on-the-fly object lives as long as the pins (the call) do.
  pins.clear();
  EXPECT_EQ(agent_->store_objects().size(), 1u);
  // Nothing to do: unchanged.
  Map plain{{"x", 1}, {"s", Bytes::copy_of("abc")}};
  EXPECT_FALSE(store.prepare(plain, out, pins));
  EXPECT_TRUE(pins.empty());
}

TEST_F(DriverStoreTest, FullStoreIsOutOfMemory) {
  agent_->store_capacity = 1000;
  DriverStore store(agent_, 0);
  ObjectRef a = store.put(Bytes(std::vector<uint8_t>(600, 1)));
  try {
    store.put(Bytes(std::vector<uint8_t>(600, 2)));
    ADD_FAILURE() << "put over capacity succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
  }
  // threshold 0: large Bytes are not stored on the fly.
  Map out;
  std::vector<Bytes> pins;
  EXPECT_FALSE(store.prepare(Map{{"b", Bytes(std::vector<uint8_t>(5000, 3))}}, out, pins));
}

TEST_F(DriverStoreTest, ShutdownRemovesReferencedObjects) {
  DriverStore store(agent_, 1024);
  ObjectRef ref = store.put(Bytes::copy_of("kept past shutdown"));
  store.shutdown();
  EXPECT_FALSE(exists(ref.name()));
  EXPECT_EQ(ref.bytes(), Bytes::copy_of("kept past shutdown"));  // still mapped
  EXPECT_THROW(store.put(Bytes::copy_of("x")), Error);
}

TEST_F(DriverStoreTest, NoAgentKeepsValuesInMemory) {
  DriverStore store(nullptr, 1024);
  EXPECT_FALSE(store.enabled());
  Bytes data = Bytes::copy_of("in memory");
  ObjectRef ref = store.put(data);
  EXPECT_TRUE(ref.name().empty());
  EXPECT_EQ(ref.bytes().data(), data.data());
}

}  // namespace
}  // namespace troupe::internal

namespace troupe::internal {
namespace {

// Workers on other hosts: the object goes to each host's agent once, whatever the number of
// calls or workers there; the copies are freed with the object.
TEST_F(DriverStoreTest, RemoteCopiesOncePerHost) {
  auto remote1 = std::make_shared<troupe_test::FakeAgentClient>(1, "fake-1", AgentEvents{});
  auto remote2 = std::make_shared<troupe_test::FakeAgentClient>(2, "fake-2", AgentEvents{});
  DriverStore store(nullptr, 1024, [&](size_t host) -> std::shared_ptr<AgentClient> {
    return host == 1 ? remote1 : remote2;
  });
  EXPECT_FALSE(store.enabled());
  EXPECT_TRUE(store.remote_enabled());
  ObjectRef ref = store.put(Bytes(std::vector<uint8_t>(4096, 4)));
  EXPECT_TRUE(ref.name().empty());  // no store on the driver's host: kept in memory
  std::vector<Bytes> pins;
  for (size_t host : {1, 1, 2, 1, 2}) {
    Map out;
    ASSERT_TRUE(store.prepare(Map{{"data", ref}}, out, pins, host));
    std::string name;
    size_t size = 0;
    ASSERT_TRUE(store::read_marker(out[0].second, name, size));
    EXPECT_EQ(size, 4096u);
  }
  EXPECT_EQ(remote1->store_puts(), 1);
  EXPECT_EQ(remote2->store_puts(), 1);
  EXPECT_EQ(remote1->store_objects().size(), 1u);
  pins.clear();
  ref = ObjectRef();
  EXPECT_TRUE(remote1->store_objects().empty());
  EXPECT_TRUE(remote2->store_objects().empty());
  // A large Bytes without put: copied for the call, freed with its pins.
  Map out;
  ASSERT_TRUE(store.prepare(Map{{"data", Bytes(std::vector<uint8_t>(2048, 5))}}, out, pins, 2));
  EXPECT_EQ(remote2->store_objects().size(), 1u);
  pins.clear();
  EXPECT_TRUE(remote2->store_objects().empty());
}

}  // namespace
}  // namespace troupe::internal
