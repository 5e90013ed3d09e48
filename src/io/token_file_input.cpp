// Which inputs name a token file, and opening them (see token_files.h): the one convention the
// `varpack` command and Python's varpack.read_tokens share.
#include <string>
#include <string_view>
#include <vector>

#include "mapped_file.h"
#include "token_file_raw.h"
#include "varpack/error.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

constexpr std::string_view kMegatronPrefix = "megatron:";

}  // namespace

bool is_token_file(std::string_view input) {
  return input.starts_with(kMegatronPrefix) || input.ends_with(".bin") || input.ends_with(".npy");
}

std::vector<std::string> token_file_paths(std::string_view input) {
  if (input.ends_with(".npy")) return {std::string(input), default_offsets_path(input)};
  if (input.starts_with(kMegatronPrefix)) input.remove_prefix(kMegatronPrefix.size());
  if (input.ends_with(".bin")) input.remove_suffix(4);
  return {std::string(input) + ".bin", std::string(input) + ".idx"};
}

TokenFile::Raw open_token_file_raw(const std::string& input) {
  std::string_view name = input;
  if (name.starts_with(kMegatronPrefix)) return read_megatron_raw(std::string(name.substr(kMegatronPrefix.size())));
  if (name.ends_with(".bin")) return read_megatron_raw(std::string(name.substr(0, name.size() - 4)));
  if (name.ends_with(".npy")) return read_npy_raw(input, default_offsets_path(input));
  throw Error(input + ": not a token file (expected DATA.npy with DATA.offsets.npy, PREFIX.bin with "
              "PREFIX.idx, or megatron:PREFIX)");
}

TokenFile open_token_file(const std::string& input, const ProgressFn& progress) {
  return TokenFile(open_token_file_raw(input), progress);
}

std::vector<int64_t> token_file_lengths(const std::string& input) {
  return open_token_file_raw(input).lengths;
}

}  // namespace varpack
