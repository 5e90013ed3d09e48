// The JSON documents' shared parts: see report.h.
#include "report.h"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <numeric>

#include "input.h"

namespace varpack::cli {

Json report_header(const std::vector<std::string>& argv) {
  const std::time_t now = std::time(nullptr);
  std::tm utc {};
  char time[32];
  std::strftime(time, sizeof(time), "%FT%TZ", ::gmtime_r(&now, &utc));
  Json json;
  json["varpack_version"] = VARPACK_VERSION;
  json["command_line"] = argv;
  json["time_utc"] = time;
  return json;
}

Json input_sizes(const std::string& input) {
  Json sizes = Json::object();
  for (const varpack::ProtectedFile& file : input_files(input)) {
    struct stat st {};
    const bool regular = file.path != "-" && ::stat(file.path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    sizes[file.path] = regular ? Json(static_cast<int64_t>(st.st_size)) : Json(nullptr);
  }
  return sizes;
}

Json length_summary(std::vector<int64_t> lengths) {
  Json json;
  json["count"] = lengths.size();
  if (lengths.empty()) return json;
  std::sort(lengths.begin(), lengths.end());
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  json["min"] = lengths.front();
  json["max"] = lengths.back();
  json["mean"] = static_cast<double>(total) / static_cast<double>(lengths.size());
  Json percentiles;
  for (const int p : {10, 25, 50, 75, 90, 95, 99}) {
    // Nearest rank: the smallest length with at least p% of the samples at or below it.
    const size_t rank = (static_cast<size_t>(p) * lengths.size() + 99) / 100;
    std::string key = "p";  // not "p" + ...: GCC 12 warns falsely (-Wrestrict) on that
    key += std::to_string(p);
    percentiles[key] = lengths[std::max<size_t>(rank, 1) - 1];
  }
  json["percentiles"] = std::move(percentiles);
  return json;
}

std::string to_text(const Json& json) {
  return json.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace varpack::cli
