// Input and output of token data: TokenStore (samples in flat buffers, a TokenSource), the
// streaming JSONL reader, the packed-row writers (JSONL and the binary format of docs/FORMAT.md),
// a memory-mapped reader of that binary format, and AtomicFile, through which every output goes
// so that an error never leaves a partial file at the output path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "varpack/batch.h"
#include "varpack/pack.h"

namespace varpack {

class MappedFile;  // src/io/mapped_file.h: a read-only mapping of a whole file

// Samples in two flat int32 buffers with offsets: 4 bytes per token (8 with labels) plus a few
// bytes per sample, whatever the size of the text they were read from.
class TokenStore final : public TokenSource {
 public:
  // Appends a sample. Empty `labels`: the sample has no labels of its own; otherwise `labels`
  // must have the length of `input_ids`. Ids must be >= 0, labels >= 0 or -100. Throws
  // varpack::Error naming the sample (and the value) if not.
  void add(std::span<const int32_t> input_ids, std::span<const int32_t> labels = {});

  int64_t num_samples() const override { return static_cast<int64_t>(token_begin_.size()) - 1; }
  std::span<const int32_t> input_ids(int64_t sample) const override;
  std::span<const int32_t> labels(int64_t sample) const override;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t length(int64_t sample) const { return token_begin_[sample + 1] - token_begin_[sample]; }
  std::vector<int64_t> lengths() const;  // what plan_packing takes

 private:
  std::vector<int32_t> tokens_;
  std::vector<int64_t> token_begin_{0};  // num_samples + 1 entries
  std::vector<int32_t> labels_;          // labels of the samples that have them, concatenated
  std::vector<int64_t> label_begin_;     // num_samples entries; -1 for a sample without labels
};

// Called now and then while a long job runs: `done` of `total` units (bytes read, rows written).
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Called once per record of a JSONL file, in order: the 0-based record number (the sample index
// the planner and the outputs use), the 1-based line it came from, its input_ids, and its labels
// (empty when the record has none). The spans are valid only during the call.
using SampleFn = std::function<void(int64_t record, int64_t line, std::span<const int32_t> input_ids,
                                    std::span<const int32_t> labels)>;

// Streams a JSONL file through simdjson, one line at a time from a chunked buffer, so memory
// stays proportional to the longest line, not to the file. Each non-blank line is an object with
// an `input_ids` array of integers in [0, 2^31) and optionally `labels`: an array of the same
// length with integers in [0, 2^31) or -100 (null counts as absent). Other fields are ignored.
// Blank lines (only whitespace) are skipped: they are not records, but they count for the line
// numbers in messages. Throws varpack::Error naming the file (and line) for a missing or
// unreadable path, malformed JSON, a missing input_ids, a value out of range or not an integer,
// labels of the wrong length, or a file without any record.
void scan_jsonl(const std::string& path, const SampleFn& on_sample, const ProgressFn& progress = {});

// One image of a multimodal JSONL record (its optional "images" field, docs/FORMAT.md): the camera
// view it comes from and the tokens it puts into the decoder's sequence, one per patch.
struct ImageRecord {
  std::string view;
  int64_t patches = 0;
};

// As SampleFn, with the record's images (empty when it has none); valid only during the call.
using MultimodalSampleFn =
    std::function<void(int64_t record, int64_t line, std::span<const int32_t> input_ids,
                       std::span<const int32_t> labels, std::span<const ImageRecord> images)>;

// scan_jsonl that also reads each record's optional "images": an array of objects, each with a
// "view" string and either "patches" (an integer >= 0) or "height", "width" and "patch" (positive
// integers, height and width multiples of patch: (height / patch) * (width / patch) patches).
// Errors as scan_jsonl's, naming the image (images[i]) too. scan_jsonl ignores the field.
void scan_multimodal_jsonl(const std::string& path, const MultimodalSampleFn& on_sample,
                           const ProgressFn& progress = {});

// scan_jsonl into a TokenStore.
TokenStore read_jsonl(const std::string& path, const ProgressFn& progress = {});

// A file a command must not overwrite, with what it is to the command, for messages: "input",
// "offsets file of input tok.npy", "--report". Path "-" is standard input.
struct ProtectedFile {
  std::string path;
  std::string role;
};

// An output written so that no file of the user's is ever destroyed or left partial:
// - A regular file (or a new name) is written through a temporary file in its directory and
//   renamed onto the path by commit(). The temporary file has no name until commit() (O_TMPFILE;
//   where the file system lacks it, "<path>.tmp.<pid>.<n>"). Destroyed without commit() (an
//   error on the way) or killed, nothing is left: the path is either untouched or whole.
// - A symbolic link is written through: its final target is replaced as above, next to it, and
//   the link stays a link.
// - A stream (a FIFO, a character device such as /dev/null or a terminal, "-" or /dev/stdout for
//   standard output, /dev/fd/N) is never replaced: the output is staged in a nameless temporary
//   file (in $TMPDIR) and copied into the stream by commit(), so a failed run writes nothing to it.
// - `protect`: files the output must not be (the command's inputs and their companion files, its
//   other outputs). The constructor refuses, naming both, an output that is the same file as one
//   of them (by device and inode, so hard and symbolic links count) before anything is read.
// Writes that fail (disk full, file size limit) throw varpack::Error naming the path and cause.
class AtomicFile {
 public:
  // Throws varpack::Error naming the path if its directory does not exist or is not writable,
  // if it is a directory, or if it is one of `protect`.
  explicit AtomicFile(std::string path, std::span<const ProtectedFile> protect = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);                         // appends
  void write_at(uint64_t offset, const void* data, size_t size);     // positioned, for binary
  void commit();  // fsyncs and renames onto the path, or copies into the stream; throws on failure
  const std::string& path() const { return path_; }
  // The temporary file being written, as a path this process can open ("/proc/self/fd/N" while
  // it has no name): complete once writing is done, readable before commit().
  const std::string& temp_path() const { return temp_path_; }
  bool is_stream() const { return stream_fd_ >= 0; }
  bool to_stdout() const { return to_stdout_; }  // "-", /dev/stdout or /dev/fd/1

 private:
  void open_temp(const std::string& dir, bool may_name);
  void copy_into_stream();

  std::string path_;
  std::string target_;  // the regular file renamed onto: path_ with its symbolic links followed
  std::string temp_path_;
  int fd_ = -1;
  int stream_fd_ = -1;  // where a stream output goes at commit(); -1 for a file
  bool to_stdout_ = false;
  bool named_ = false;  // the temporary file has a name in the directory (to remove on failure)
  bool committed_ = false;
};

// Writes `text` to `path` atomically (used for the JSON report).
void write_text_file(const std::string& path, std::string_view text);

enum class OutputFormat { jsonl, binary };

// "jsonl" or "bin"; throws varpack::Error listing the accepted names.
OutputFormat parse_output_format(std::string_view name);
// The format a path asks for: ".bin" means binary, anything else JSONL.
OutputFormat output_format_for_path(std::string_view path);
std::string_view to_string(OutputFormat format);

// Packed rows as JSONL, one object per plan row with exactly these fields, in this order:
// input_ids, labels, position_ids, cu_seqlens (row-local, from 0), samples (a list of
// [sample index, offset, length], one per piece). Tokens, labels and positions are those of
// build_packed_batch with `options`; padding to a multiple of k is not written (a row holds its
// sample tokens only). The file is not committed: call out.commit() when everything succeeded.
void write_packed_jsonl(AtomicFile& out, const PackPlan& plan, const TokenSource& source,
                        const BatchOptions& options = {}, const ProgressFn& progress = {});

// Packed rows in the binary format of docs/FORMAT.md; not committed, as above.
void write_packed_binary(AtomicFile& out, const PackPlan& plan, const TokenSource& source,
                         const BatchOptions& options = {}, const ProgressFn& progress = {});

// One-call forms: write `path` in `format` and commit it.
void write_packed(const std::string& path, OutputFormat format, const PackPlan& plan,
                  const TokenSource& source, const BatchOptions& options = {},
                  const ProgressFn& progress = {});

// Reads a packed file back and checks it against its plan and source, independently of the
// batch builder: the rows and pieces are the plan's; every piece's tokens equal its source
// tokens; positions restart at 0 per piece (or continue from the piece's offset when
// `options.restart_positions_per_piece` is false); labels are -100 at each piece's first position
// and the source's label (or token) elsewhere; cu_seqlens steps by the piece lengths; no row is
// wider than planned; and every source token lies in exactly one piece unless the plan counts it
// as truncated. Throws varpack::Error naming the file, row and piece at fault. `data_path` is
// what is read (e.g. an AtomicFile's temp_path() before commit); `name` is used in messages;
// `progress` hears of the rows checked.
void check_packed_file(const std::string& data_path, const std::string& name, OutputFormat format,
                       const PackPlan& plan, const TokenSource& source,
                       const BatchOptions& options = {}, const ProgressFn& progress = {});

// A packed binary file (docs/FORMAT.md), memory-mapped and checked on open: magic, version,
// sizes, section bounds, and the consistency of the row and piece tables. Spans stay valid while
// the PackedFile lives.
class PackedFile {
 public:
  explicit PackedFile(const std::string& path);  // throws varpack::Error naming the file
  ~PackedFile();
  PackedFile(const PackedFile&) = delete;
  PackedFile& operator=(const PackedFile&) = delete;

  struct Row {
    std::span<const int32_t> input_ids;
    std::span<const int32_t> labels;
    std::span<const int32_t> position_ids;
    std::vector<int32_t> cu_seqlens;  // row-local, from 0
    std::span<const int64_t> pieces;  // 3 per piece: sample, offset, length
  };

  int64_t capacity() const { return capacity_; }
  int64_t num_samples() const { return num_samples_; }  // records in the packed input
  int64_t num_rows() const { return static_cast<int64_t>(row_width_.size()); }
  int64_t num_pieces() const { return static_cast<int64_t>(pieces_.size() / 3); }
  int64_t num_tokens() const { return static_cast<int64_t>(input_ids_.size()); }
  int64_t max_seqlen() const { return max_seqlen_; }

  std::span<const int32_t> input_ids() const { return input_ids_; }
  std::span<const int32_t> labels() const { return labels_; }
  std::span<const int32_t> position_ids() const { return position_ids_; }
  std::span<const int64_t> cu_seqlens() const { return cu_seqlens_; }    // pieces + 1, global
  std::span<const int64_t> row_offsets() const { return row_offsets_; }  // rows + 1, tokens
  std::span<const int64_t> row_pieces() const { return row_pieces_; }    // rows + 1, pieces
  std::span<const int64_t> pieces() const { return pieces_; }            // pieces x 3
  std::span<const int64_t> row_width() const { return row_width_; }      // rows
  Row row(int64_t r) const;

 private:
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  int64_t capacity_ = 0;
  int64_t num_samples_ = 0;
  int64_t max_seqlen_ = 0;
  std::span<const int32_t> input_ids_, labels_, position_ids_;
  std::span<const int64_t> cu_seqlens_, row_offsets_, row_pieces_, pieces_, row_width_;
};

// Whether `path` is a packed binary file (it starts with the format's magic); false if unreadable.
bool is_packed_file(const std::string& path);

// Per sample of the packed input: the tokens the file holds of it (0 for one without a piece).
// Throws varpack::Error naming `name` for a sample count no packing gives (far more than pieces).
std::vector<int64_t> packed_sample_lengths(const std::string& name, const PackedFile& file);

// Verifies from the file alone what docs/FORMAT.md promises beyond the tables PackedFile checks on
// open: every row within its width and every width within the capacity; positions restarting at
// 0 per piece; each sample's pieces continuing one another from token 0 without overlap; the first
// label of each piece -100 and every other one an id or -100; input ids non-negative. Throws
// varpack::Error naming `name`, the row, the piece and the token at fault.
void verify_packed_file(const std::string& name, const PackedFile& file,
                        const ProgressFn& progress = {});

}  // namespace varpack
