// The five fuzz targets (see fuzz_targets.h): JSONL, packed binary, .npy + offsets, Megatron
// .bin/.idx, and the length-profile names the command takes as "profile:NAME".
#include "fuzz_targets.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>

#include "varpack/error.h"
#include "varpack/io.h"
#include "varpack/profiles.h"
#include "varpack/token_files.h"

namespace varpack::fuzz {
namespace {

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw FuzzFailure{"cannot write the fuzz input " + path};
}

void require(bool ok, const std::string& what) {
  if (!ok) throw FuzzFailure{what};
}

// Reads every token through the spans (ASan sees any out-of-bounds one) and checks the ranges.
void check_ids(std::span<const int32_t> ids, bool labels) {
  for (const int32_t id : ids) {
    require(id >= 0 || (labels && id == -100), "token id " + std::to_string(id) + " out of range");
  }
}

void fuzz_jsonl(std::string_view input, const std::string& dir) {
  const std::string path = dir + "/input.jsonl";
  write_file(path, input);
  int64_t expected_record = 0;
  scan_jsonl(path, [&](int64_t record, int64_t line, std::span<const int32_t> ids,
                       std::span<const int32_t> labels) {
    require(record == expected_record++, "records out of order");
    require(line >= 1 && line > record, "bad line number " + std::to_string(line));
    require(labels.empty() || labels.size() == ids.size(), "labels of the wrong length");
    check_ids(ids, false);
    check_ids(labels, true);
  });
}

void fuzz_packed_binary(std::string_view input, const std::string& dir) {
  const std::string path = dir + "/input.bin";
  write_file(path, input);
  const PackedFile file(path);
  int64_t tokens = 0;
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    const PackedFile::Row row = file.row(r);
    require(row.labels.size() == row.input_ids.size() && row.position_ids.size() == row.input_ids.size(),
            "row " + std::to_string(r) + ": sections of different lengths");
    require(row.cu_seqlens.front() == 0 &&
                row.cu_seqlens.back() == static_cast<int32_t>(row.input_ids.size()),
            "row " + std::to_string(r) + ": cu_seqlens does not span the row");
    // Touch every element; unsigned, so that adding any values wraps instead of overflowing.
    volatile uint64_t sum = 0;
    for (size_t i = 0; i < row.input_ids.size(); ++i) {
      sum = sum + static_cast<uint32_t>(row.input_ids[i]) + static_cast<uint32_t>(row.labels[i]) +
            static_cast<uint32_t>(row.position_ids[i]);
    }
    for (const int64_t v : row.pieces) sum = sum + static_cast<uint64_t>(v);
    tokens += static_cast<int64_t>(row.input_ids.size());
  }
  require(tokens == file.num_tokens(), "rows do not add up to the token count");
  // What `varpack stats` and `varpack inspect --check` read: may refuse, never crash.
  const std::vector<int64_t> lengths = packed_sample_lengths(path, file);
  require(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}) == file.num_tokens(),
          "sample lengths do not add up to the token count");
  verify_packed_file(path, file);
}

// Full read and lengths-only read of a token-file input: both refuse, or the lengths agree (the
// lengths-only path skips the token range check, so it may accept what the full read refuses).
void check_token_file(const std::string& input) {
  std::vector<int64_t> lengths;
  bool lengths_ok = true;
  try {
    lengths = token_file_lengths(input);
  } catch (const Error&) {
    lengths_ok = false;
  }
  const TokenFile file = open_token_file(input);
  require(lengths_ok, "token_file_lengths refused what open_token_file read");
  require(std::vector<int64_t>(file.lengths().begin(), file.lengths().end()) == lengths,
          "token_file_lengths and open_token_file disagree");
  int64_t total = 0;
  for (int64_t s = 0; s < file.num_samples(); ++s) {
    const auto ids = file.input_ids(s);
    require(static_cast<int64_t>(ids.size()) == file.lengths()[static_cast<size_t>(s)], "length mismatch");
    check_ids(ids, false);
    total += static_cast<int64_t>(ids.size());
  }
  require(total == file.num_tokens(), "lengths do not add up to num_tokens");
}

void fuzz_npy(std::string_view input, const std::string& dir) {
  const auto [tokens, offsets] = split_two_files(input);
  write_file(dir + "/tokens.npy", tokens);
  write_file(dir + "/tokens.offsets.npy", offsets);
  check_token_file(dir + "/tokens.npy");
}

void fuzz_megatron(std::string_view input, const std::string& dir) {
  const auto [idx, bin] = split_two_files(input);
  write_file(dir + "/data.idx", idx);
  write_file(dir + "/data.bin", bin);
  check_token_file("megatron:" + dir + "/data");
}

// The name after "profile:"; a small sample count and a seed come from the input's last bytes so
// the generator's arithmetic is fuzzed too.
void fuzz_profile(std::string_view input, const std::string&) {
  std::string_view name = input;
  int64_t samples = 64;
  uint64_t seed = 0;
  if (const size_t bar = input.rfind('|'); bar != std::string_view::npos) {
    name = input.substr(0, bar);
    for (const char c : input.substr(bar + 1)) seed = seed * 131 + static_cast<unsigned char>(c);
    samples = static_cast<int64_t>(seed % 512);
  }
  const LengthProfile& profile = find_length_profile(name);
  const std::vector<int64_t> lengths = generate_lengths(name, samples, seed);
  require(static_cast<int64_t>(lengths.size()) == samples, "wrong number of lengths");
  for (const int64_t length : lengths) {
    require(length >= 1 && length <= profile.capacity,
            "length " + std::to_string(length) + " outside [1, " + std::to_string(profile.capacity) + "]");
  }
}

}  // namespace

std::pair<std::string_view, std::string_view> split_two_files(std::string_view input) {
  if (input.size() < 4) return {input, {}};
  uint32_t n;
  std::memcpy(&n, input.data(), 4);
  const std::string_view rest = input.substr(4);
  n = static_cast<uint32_t>(n % (rest.size() + 1));
  return {rest.substr(0, n), rest.substr(n)};
}

std::string join_two_files(std::string_view first, std::string_view second) {
  const auto n = static_cast<uint32_t>(first.size());
  std::string out(4, '\0');
  std::memcpy(out.data(), &n, 4);
  out += first;
  out += second;
  return out;
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all{
      {"jsonl", fuzz_jsonl, true},
      {"packed_binary", fuzz_packed_binary, false},
      {"npy", fuzz_npy, false},
      {"megatron", fuzz_megatron, false},
      {"profile", fuzz_profile, true},
  };
  return all;
}

}  // namespace varpack::fuzz
