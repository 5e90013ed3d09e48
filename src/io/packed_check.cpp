// check_packed_file: reads packed rows back (JSONL through the line reader and simdjson, binary
// through PackedFile) and compares them with the plan and the source token by token, with its
// own plain loops rather than the batch builder's code, so it can catch a writer or builder bug.
#include <simdjson.h>

#include <algorithm>
#include <string>
#include <vector>

#include "line_reader.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

struct RowView {
  std::span<const int32_t> input_ids, labels, position_ids, cu_seqlens;
  std::vector<Piece> pieces;
};

class Checker {
 public:
  Checker(const std::string& name, const PackPlan& plan, const TokenSource& source,
          const BatchOptions& options, const ProgressFn& progress)
      : name_(name), plan_(plan), source_(source), options_(options), progress_(progress) {}

  void row(int64_t r, const RowView& row) {
    if (progress_) progress_(static_cast<uint64_t>(r), static_cast<uint64_t>(plan_.rows()));
    auto fail = [&](const std::string& what) {
      throw Error(name_ + ": row " + std::to_string(r) + ": " + what +
                  "; the file does not match its plan (a bug: please report it)");
    };
    if (r >= plan_.rows()) fail("the plan has only " + std::to_string(plan_.rows()) + " rows");
    const auto planned = plan_.row(r);
    if (!std::equal(planned.begin(), planned.end(), row.pieces.begin(), row.pieces.end())) {
      fail("its pieces differ from the plan's");
    }
    const size_t size = row.input_ids.size();
    if (row.labels.size() != size || row.position_ids.size() != size) {
      fail("input_ids, labels and position_ids differ in length");
    }
    if (static_cast<int64_t>(size) > plan_.row_width[static_cast<size_t>(r)]) {
      fail("it is wider than planned");
    }
    if (row.cu_seqlens.size() != row.pieces.size() + 1 || row.cu_seqlens.front() != 0 ||
        static_cast<size_t>(row.cu_seqlens.back()) != size) {
      fail("cu_seqlens does not run from 0 to the row length over its pieces");
    }
    for (size_t p = 0; p < row.pieces.size(); ++p) {
      const Piece& piece = row.pieces[p];
      const int64_t start = row.cu_seqlens[p];
      if (row.cu_seqlens[p + 1] - start != piece.length) {
        fail("cu_seqlens disagrees with the length of piece " + std::to_string(p));
      }
      if (piece.sample < 0 || piece.sample >= source_.num_samples() || piece.offset < 0 ||
          piece.offset + piece.length > static_cast<int64_t>(source_.input_ids(piece.sample).size())) {
        fail("piece " + std::to_string(p) + " is not within its source sample");
      }
      const auto ids = source_.input_ids(piece.sample);
      const auto labels = source_.labels(piece.sample);
      for (int64_t i = 0; i < piece.length; ++i) {
        const auto at = static_cast<size_t>(start + i);
        const auto src = static_cast<size_t>(piece.offset + i);
        const int64_t position = options_.restart_positions_per_piece ? i : piece.offset + i;
        const int32_t label = i == 0 ? kIgnoreLabel : labels.empty() ? ids[src] : labels[src];
        if (row.input_ids[at] != ids[src] || row.position_ids[at] != position ||
            row.labels[at] != label) {
          fail("token " + std::to_string(i) + " of piece " + std::to_string(p) + " (sample " +
               std::to_string(piece.sample) + ") differs from its source");
        }
      }
      seen_.push_back(piece);
    }
    ++rows_;
  }

  // After all rows: as many rows as planned, and the pieces tile every sample from its first
  // token, leaving out only what the plan counts as truncated.
  void finish() {
    if (rows_ != plan_.rows()) {
      throw Error(name_ + ": " + std::to_string(rows_) + " rows, the plan has " +
                  std::to_string(plan_.rows()));
    }
    std::sort(seen_.begin(), seen_.end(), [](const Piece& a, const Piece& b) {
      return a.sample != b.sample ? a.sample < b.sample : a.offset < b.offset;
    });
    int64_t missing = 0;
    size_t p = 0;
    for (int64_t s = 0; s < source_.num_samples(); ++s) {
      int64_t next = 0;
      for (; p < seen_.size() && seen_[p].sample == s; ++p) {
        if (seen_[p].offset != next) {
          throw Error(name_ + ": sample " + std::to_string(s) + ": tokens from " +
                      std::to_string(std::min(next, seen_[p].offset)) +
                      " are placed twice or not at all");
        }
        next += seen_[p].length;
      }
      missing += static_cast<int64_t>(source_.input_ids(s).size()) - next;
    }
    if (missing != plan_.stats.truncated_tokens) {
      throw Error(name_ + ": " + std::to_string(missing) + " source tokens are in no row, the plan "
                  "counts " + std::to_string(plan_.stats.truncated_tokens) + " as truncated");
    }
  }

 private:
  const std::string& name_;
  const PackPlan& plan_;
  const TokenSource& source_;
  const BatchOptions& options_;
  const ProgressFn& progress_;
  std::vector<Piece> seen_;
  int64_t rows_ = 0;
};

void check_binary(const std::string& data_path, Checker& checker) {
  const PackedFile file(data_path);
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    const PackedFile::Row row = file.row(r);
    RowView view{row.input_ids, row.labels, row.position_ids, row.cu_seqlens, {}};
    for (size_t p = 0; p < row.pieces.size(); p += 3) {
      view.pieces.push_back({row.pieces[p], row.pieces[p + 1], row.pieces[p + 2]});
    }
    checker.row(r, view);
  }
}

void check_jsonl(const std::string& data_path, const std::string& name, Checker& checker) {
  simdjson::dom::parser parser;
  std::vector<int32_t> ids, labels, positions, cu_seqlens;
  int64_t r = 0;
  detail::for_each_line(data_path, [&](const char* data, size_t size, int64_t line) {
    auto fail = [&](const char* what) -> Error {
      return Error(name + ":" + std::to_string(line) + ": " + what);
    };
    simdjson::dom::object row;
    if (parser.parse(data, size, false).get_object().get(row)) throw fail("not a JSON object");
    auto ints = [&](const char* key, std::vector<int32_t>& out) {
      out.clear();
      simdjson::dom::array values;
      if (row[key].get_array().get(values)) throw fail("a field is missing or not an array");
      for (simdjson::dom::element v : values) {
        int64_t x = 0;
        if (v.get_int64().get(x)) throw fail("a value is not an integer");
        out.push_back(static_cast<int32_t>(x));
      }
    };
    ints("input_ids", ids);
    ints("labels", labels);
    ints("position_ids", positions);
    ints("cu_seqlens", cu_seqlens);
    RowView view{ids, labels, positions, cu_seqlens, {}};
    simdjson::dom::array samples;
    if (row["samples"].get_array().get(samples)) throw fail("no samples array");
    for (simdjson::dom::element sample : samples) {
      int64_t v[3] = {0, 0, 0};
      size_t k = 0;
      simdjson::dom::array triple;
      if (sample.get_array().get(triple)) throw fail("a sample entry is not an array");
      for (simdjson::dom::element x : triple) {
        if (k == 3 || x.get_int64().get(v[k])) throw fail("a sample entry is not 3 integers");
        ++k;
      }
      view.pieces.push_back({v[0], v[1], v[2]});
    }
    checker.row(r++, view);
  });
}

}  // namespace

void check_packed_file(const std::string& data_path, const std::string& name, OutputFormat format,
                       const PackPlan& plan, const TokenSource& source,
                       const BatchOptions& options, const ProgressFn& progress) {
  Checker checker(name, plan, source, options, progress);
  if (format == OutputFormat::binary) {
    check_binary(data_path, checker);
  } else {
    check_jsonl(data_path, name, checker);
  }
  checker.finish();
}

}  // namespace varpack
