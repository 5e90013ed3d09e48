// Choosing the output format (by name or by the path's extension) and the one-call writer.
#include <string>

#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {

OutputFormat parse_output_format(std::string_view name) {
  if (name == "jsonl") return OutputFormat::jsonl;
  if (name == "bin") return OutputFormat::binary;
  throw Error("unknown output format '" + std::string(name) + "'; use jsonl or bin");
}

OutputFormat output_format_for_path(std::string_view path) {
  return path.ends_with(".bin") ? OutputFormat::binary : OutputFormat::jsonl;
}

std::string_view to_string(OutputFormat format) {
  return format == OutputFormat::binary ? "bin" : "jsonl";
}

void write_packed(const std::string& path, OutputFormat format, const PackPlan& plan,
                  const TokenSource& source, const BatchOptions& options,
                  const ProgressFn& progress) {
  AtomicFile out(path);
  if (format == OutputFormat::binary) {
    write_packed_binary(out, plan, source, options, progress);
  } else {
    write_packed_jsonl(out, plan, source, options, progress);
  }
  out.commit();
}

}  // namespace varpack
