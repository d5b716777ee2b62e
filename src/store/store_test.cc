// Unit tests of the store layer: object names, create/map/remove, the marker, HostStore's
// accounting and capacity, and the sweep of stale objects. Objects go to a private temporary
// directory (TROUPE_STORE_DIR), never /dev/shm.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "store/host_store.h"
#include "store/shm_object.h"

namespace troupe::store {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/troupe-store-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::setenv("TROUPE_STORE_DIR", dir_.c_str(), 1);
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
};

TEST_F(StoreTest, Names) {
  std::string a = new_object_name(1234), b = new_object_name(1234);
  EXPECT_NE(a, b);
  EXPECT_TRUE(valid_object_name(a));
  EXPECT_EQ(owner_of(a), 1234);
  EXPECT_EQ(a.size(), std::string("troupe-1234-").size() + 32);
  for (const char* bad :
       {"", "troupe-", "troupe-12-", "troupe--0123456789abcdef0123456789abcdef",
        "troupe-12-0123456789abcdef0123456789abcde", "troupe-12-0123456789abcdef0123456789abcdeF",
        "troupe-12-../../../etc/passwd0123456789abcd", "other-12-x",
        "troupe-12-0123456789abcdef0123456789abcdef/x"})
    EXPECT_FALSE(valid_object_name(bad)) << bad;
}

TEST_F(StoreTest, CreateMapRemove) {
  const std::string name = new_object_name(::getpid());
  Bytes data = Bytes::copy_of("hello, store");
  Bytes own = create_object(dir_, name, data.data(), data.size());
  EXPECT_EQ(own, data);
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Bytes mapped = map_object(dir_, name, data.size());
  EXPECT_EQ(mapped, data);
  // Created once: a second create of the same name fails.
  EXPECT_THROW(create_object(dir_, name, data.data(), data.size()), Error);
  EXPECT_TRUE(remove_object(dir_, name));
  EXPECT_FALSE(exists(name));
  EXPECT_EQ(mapped, data);  // mappings outlive the file
  EXPECT_FALSE(remove_object(dir_, name));
}

TEST_F(StoreTest, MapRejectsBadNameSizeAndMissingFile) {
  const std::string name = new_object_name(::getpid());
  Bytes data = Bytes::copy_of("0123456789");
  create_object(dir_, name, data.data(), data.size());
  auto code_of = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kOk;
  };
  EXPECT_EQ(code_of([&] { map_object(dir_, name, 11); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { map_object(dir_, "../" + name, 10); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { map_object(dir_, new_object_name(1), 10); }),
            ErrorCode::kInvalidArgument);
  // A marker with a bad name never touches a file.
  Value marker = Map{{kMarkerKey, Array{"/etc/passwd", 10}}};
  EXPECT_EQ(code_of([&] { resolve_markers(marker); }), ErrorCode::kInvalidArgument);
  Value neg = Map{{kMarkerKey, Array{name, -1}}};
  EXPECT_EQ(code_of([&] { resolve_markers(neg); }), ErrorCode::kInvalidArgument);
}

TEST_F(StoreTest, MarkersResolveAndExport) {
  Value v =
      Map{{"a", Array{Bytes::copy_of(std::string(100, 'x')), 3}}, {"b", Bytes::copy_of("tiny")}};
  EXPECT_EQ(export_large(v, 50, ::getpid()), 1u);
  std::string name;
  size_t size = 0;
  ASSERT_TRUE(read_marker(v.find("a")->as_array()[0], name, size));
  EXPECT_EQ(size, 100u);
  EXPECT_TRUE(v.find("b")->is_bytes());
  EXPECT_TRUE(resolve_markers(v, /*remove=*/true));
  EXPECT_EQ(v.find("a")->as_array()[0].as_bytes(), Bytes::copy_of(std::string(100, 'x')));
  EXPECT_FALSE(exists(name));
}

TEST_F(StoreTest, HostStoreCapacityAndRelease) {
  HostStore hs(dir_, ::getpid(), 1000, "host-x");
  int c1 = 0, c2 = 0;
  std::string a = hs.reserve(600, &c1);
  try {
    hs.reserve(500, &c2);
    ADD_FAILURE() << "reserve over capacity succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(e.message().find("requested 500 bytes, used 600 of a capacity of 1000"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("host-x"), std::string::npos);
  }
  std::string b = hs.reserve(400, &c2);
  Bytes data(std::vector<uint8_t>(600, 1));
  create_object(dir_, a, data.data(), data.size());
  EXPECT_EQ(hs.usage().objects, 2);
  EXPECT_EQ(hs.usage().bytes, 1000);
  EXPECT_EQ(hs.usage().files, 1);
  EXPECT_TRUE(hs.free(a));
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(hs.free(a));
  EXPECT_EQ(hs.release_client(&c2), 1u);
  EXPECT_EQ(hs.usage().objects, 0);
  EXPECT_EQ(hs.usage().bytes, 0);
  // release_all also removes files named for this owner that it never reserved (results).
  create_object(dir_, new_object_name(::getpid()), data.data(), 1);
  hs.release_all();
  EXPECT_EQ(hs.usage().files, 0);
}

TEST_F(StoreTest, SweepRemovesOnlyObjectsOfDeadOwners) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // `child` is now a dead pid
  Bytes data = Bytes::copy_of("x");
  std::string stale = new_object_name(child), live = new_object_name(::getpid());
  create_object(dir_, stale, data.data(), 1);
  create_object(dir_, live, data.data(), 1);
  std::ofstream(dir_ + "/unrelated-file") << "keep";
  EXPECT_EQ(sweep_stale(dir_), 1u);
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists("unrelated-file"));
}

}  // namespace
}  // namespace troupe::store
