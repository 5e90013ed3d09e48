// AtomicFile: the path gets the whole content on commit, stays untouched when an error comes
// first, and no temporary file is ever left behind; protected files are refused, symbolic links
// written through, streams written only on commit.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <vector>

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

TEST(AtomicFile, RefusesAProtectedFileBeforeWriting) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), "input");
  std::filesystem::create_hard_link(dir.file("in.jsonl"), dir.file("link.jsonl"));
  const std::vector<ProtectedFile> protect = {{dir.file("in.jsonl"), "input"},
                                              {dir.file("new.json"), "--out"}};
  for (const char* name : {"in.jsonl", "link.jsonl", "new.json"}) {
    try {
      AtomicFile out(dir.file(name), protect);
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("it is the same file as the "), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_file(dir.file("in.jsonl")), "input");
  AtomicFile other(dir.file("other.json"), protect);  // anything else is fine
}

TEST(AtomicFile, WritesThroughASymbolicLink) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("d"));
  std::filesystem::create_symlink("d/target", dir.file("link"));
  {
    AtomicFile out(dir.file("link"));
    out.write("new", 3);
    out.commit();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link")));
  EXPECT_EQ(read_file(dir.file("d/target")), "new");
}

TEST(AtomicFile, AStreamGetsTheOutputOnlyOnCommit) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // lets the writer open at once
  ASSERT_GE(reader, 0);
  {
    AtomicFile out(fifo);
    EXPECT_TRUE(out.is_stream());
    out.write_at(2, "cd", 2);
    out.write_at(0, "ab", 2);
    char buffer[8];
    EXPECT_EQ(::read(reader, buffer, sizeof(buffer)), -1);  // nothing before commit
    out.commit();
    EXPECT_EQ(::read(reader, buffer, sizeof(buffer)), 4);
    EXPECT_EQ(std::string(buffer, 4), "abcd");
  }
  ::close(reader);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"fifo"}));
}

TEST(AtomicFile, WriteTextFile) {
  TempDir dir;
  write_text_file(dir.file("r.json"), "{}\n");
  EXPECT_EQ(read_file(dir.file("r.json")), "{}\n");
}

}  // namespace
}  // namespace varpack
