// AtomicFile: the path gets the whole content on commit, stays untouched when an error comes
// first, and no temporary file is ever left behind.
#include <gtest/gtest.h>

#include <stdexcept>

#include "temp_dir.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

TEST(AtomicFile, CommitReplacesTheFileWhole) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  write_file(path, "old");
  {
    AtomicFile out(path);
    out.write("hello ", 6);
    out.write("world", 5);
    out.write_at(0, "J", 1);
    EXPECT_EQ(read_file(path), "old");  // nothing visible before commit
    out.commit();
  }
  EXPECT_EQ(read_file(path), "Jello world");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"out.txt"}));
}

TEST(AtomicFile, AnErrorBeforeCommitLeavesNoTrace) {
  TempDir dir;
  const std::string kept = dir.file("kept.txt");
  write_file(kept, "previous content");
  try {
    AtomicFile out(kept);
    out.write("partial", 7);
    throw std::runtime_error("failure while writing");
  } catch (const std::runtime_error&) {
  }
  try {
    AtomicFile out(dir.file("new.txt"));
    out.write("partial", 7);
    throw std::runtime_error("failure while writing");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(kept), "previous content");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"kept.txt"}));
}

TEST(AtomicFile, MissingDirectoryIsAClearError) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/out.bin");
  try {
    AtomicFile out(path);
    FAIL();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot write " + path), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  }
  EXPECT_TRUE(dir.listing().empty());
  EXPECT_THROW(AtomicFile out(dir.path().string()), Error);  // a directory is not a file name
}

TEST(AtomicFile, WriteTextFile) {
  TempDir dir;
  write_text_file(dir.file("r.json"), "{}\n");
  EXPECT_EQ(read_file(dir.file("r.json")), "{}\n");
}

}  // namespace
}  // namespace varpack
