// Loading a command's samples from a JSONL file, a token file or a generated profile (see input.h).
#include "input.h"

#include "arrow_input.h"
#include "progress.h"
#include "varpack/error.h"
#include "varpack/profiles.h"
#include "varpack/token_files.h"

namespace varpack::cli {
namespace {

constexpr std::string_view kProfilePrefix = "profile:";
// Stand-in token ids for generated samples stay below a small vocabulary; only lengths matter.
constexpr int64_t kStandInVocabulary = 32000;

bool is_profile(const std::string& input) { return input.starts_with(kProfilePrefix); }

std::vector<int64_t> profile_lengths(const std::string& input) {
  return generate_lengths(std::string_view(input).substr(kProfilePrefix.size()));
}

// The planner would reject the sample too, but only by its index; here we know its file (and line:
// `line` 0 for token files, which have none).
void check_length(const std::string& input, int64_t record, int64_t line, size_t length,
                  int64_t max_length) {
  if (max_length <= 0 || static_cast<int64_t>(length) <= max_length) return;
  const std::string l = std::to_string(max_length);
  const std::string where = line > 0 ? ":" + std::to_string(line) : "";
  throw Error(input + where + ": sample " + std::to_string(record) + " has " +
              std::to_string(length) + " tokens, more than the capacity " + l +
              "; use --overlong truncate (keep its first " + l + ") or --overlong split (pieces " +
              "of at most " + l + "), or a larger --capacity");
}

int64_t image_tokens(std::span<const ImageRecord> images) {
  int64_t total = 0;
  for (const auto& image : images) total += image.patches;
  return total;
}

// A record with images keeps them with its text in one row: it must fit the capacity.
void check_multimodal_length(const std::string& input, int64_t record, int64_t line, int64_t images,
                             size_t text, const ImageOptions& options) {
  const int64_t length = images + static_cast<int64_t>(text);
  if (images == 0 || options.capacity <= 0 || length <= options.capacity) return;
  throw Error(input + ":" + std::to_string(line) + ": sample " + std::to_string(record) + " has " +
              std::to_string(length) + " tokens (" + std::to_string(images) + " image + " +
              std::to_string(text) + " text), more than the capacity " +
              std::to_string(options.capacity) + "; a sample with images is never split or " +
              "truncated: use a larger --capacity or smaller images");
}

// A token file or Arrow input, its samples checked against `max_length` like a JSONL file's.
TokenFile open_checked_token_file(const std::string& input, int64_t max_length, const std::string& column) {
  ProgressBar bar("reading " + input, "tokens");
  TokenFile file = is_token_file(input) ? open_token_file(input, bar.fn()) : open_arrow_input(input, column);
  const auto lengths = file.lengths();
  for (size_t i = 0; i < lengths.size(); ++i) {
    check_length(input, static_cast<int64_t>(i), 0, static_cast<size_t>(lengths[i]), max_length);
  }
  return file;
}

}  // namespace

TokenStore load_samples(const std::string& input, int64_t max_length, const ImageOptions& options) {
  if (is_profile(input)) {
    TokenStore store;
    std::vector<int32_t> ids;
    int64_t next = 0;
    for (const int64_t length : profile_lengths(input)) {
      ids.resize(static_cast<size_t>(length));
      for (auto& id : ids) id = static_cast<int32_t>(next++ % kStandInVocabulary);
      store.add(ids);
    }
    return store;
  }
  ProgressBar bar("reading " + input, "bytes");
  TokenStore store;
  std::vector<int32_t> expanded_ids, expanded_labels;
  scan_multimodal_jsonl(
      input,
      [&](int64_t record, int64_t line, std::span<const int32_t> ids,
          std::span<const int32_t> labels, std::span<const ImageRecord> images) {
        const int64_t n = image_tokens(images);
        check_multimodal_length(input, record, line, n, ids.size(), options);
        check_length(input, record, line, static_cast<size_t>(n) + ids.size(), max_length);
        if (n == 0) {
          store.add(ids, labels);
          return;
        }
        if (options.token_id < 0) {
          throw Error(input + ":" + std::to_string(line) + ": sample " + std::to_string(record) +
                      " has images (" + std::to_string(n) + " image tokens); give --image-token-id ID, " +
                      "the placeholder token id of image tokens in the packed rows");
        }
        // Placeholders (label -100: nothing predicts an image token) before the text.
        expanded_ids.assign(static_cast<size_t>(n), static_cast<int32_t>(options.token_id));
        expanded_ids.insert(expanded_ids.end(), ids.begin(), ids.end());
        expanded_labels.assign(static_cast<size_t>(n), kIgnoreLabel);
        const auto text_labels = labels.empty() ? ids : labels;
        expanded_labels.insert(expanded_labels.end(), text_labels.begin(), text_labels.end());
        store.add(expanded_ids, expanded_labels);
      },
      bar.fn());
  return store;
}

std::vector<ProtectedFile> input_files(const std::string& input) {
  if (is_profile(input)) return {};
  if (!is_token_file(input) || is_packed_file(input)) return {{input, "input"}};
  std::vector<ProtectedFile> files;
  for (const std::string& path : token_file_paths(input)) {
    files.push_back({path, path == input ? "input" : "companion file of input " + input});
  }
  return files;
}

Samples open_samples(const std::string& input, int64_t max_length, const ImageOptions& images,
                     const std::string& column) {
  if (is_packed_file(input)) {
    throw Error(input + ": a packed file written by varpack pack, not samples to pack; " +
                "varpack inspect " + input + " shows it, varpack stats reads its lengths");
  }
  if (is_token_file(input) || is_arrow_input(input)) {
    auto file = std::make_unique<TokenFile>(open_checked_token_file(input, max_length, column));
    std::vector<int64_t> lengths(file->lengths().begin(), file->lengths().end());
    return {std::move(file), std::move(lengths)};
  }
  auto store = std::make_unique<TokenStore>(load_samples(input, max_length, images));
  std::vector<int64_t> lengths = store->lengths();
  return {std::move(store), std::move(lengths)};
}

std::vector<int64_t> load_lengths(const std::string& input, int64_t max_length,
                                  const ImageOptions& options, const std::string& column) {
  if (is_profile(input)) return profile_lengths(input);
  if (is_packed_file(input)) return packed_sample_lengths(input, PackedFile(input));
  if (is_token_file(input)) {
    std::vector<int64_t> lengths = token_file_lengths(input);
    for (size_t i = 0; i < lengths.size(); ++i) {
      check_length(input, static_cast<int64_t>(i), 0, static_cast<size_t>(lengths[i]), max_length);
    }
    return lengths;
  }
  if (is_arrow_input(input)) {
    const TokenFile file = open_checked_token_file(input, max_length, column);
    return {file.lengths().begin(), file.lengths().end()};
  }
  ProgressBar bar("reading " + input, "bytes");
  std::vector<int64_t> lengths;
  scan_multimodal_jsonl(
      input,
      [&](int64_t record, int64_t line, std::span<const int32_t> ids, std::span<const int32_t>,
          std::span<const ImageRecord> images) {
        const int64_t n = image_tokens(images);
        check_multimodal_length(input, record, line, n, ids.size(), options);
        check_length(input, record, line, static_cast<size_t>(n) + ids.size(), max_length);
        lengths.push_back(n + static_cast<int64_t>(ids.size()));
      },
      bar.fn());
  return lengths;
}

}  // namespace varpack::cli
