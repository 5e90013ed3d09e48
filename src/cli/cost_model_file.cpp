// The cost-model JSON file (see cost_model_file.h), parsed with simdjson's DOM parser.
#include "cost_model_file.h"

#include <simdjson.h>

#include "varpack/error.h"

namespace varpack::cli {

namespace {

double number(const simdjson::dom::object& object, const char* key, const std::string& path, bool required) {
  simdjson::dom::element value;
  if (object[key].get(value) != simdjson::SUCCESS) {
    if (!required) return 0.0;
    throw Error(path + ": the cost model has no \"" + key +
                "\"; write the file with `python -m varpack calibrate` or varpack.CostModel.save");
  }
  double x = 0;
  if (value.get_double().get(x) != simdjson::SUCCESS) {
    int64_t i = 0;
    if (value.get_int64().get(i) != simdjson::SUCCESS)
      throw Error(path + ": \"" + key + "\" must be a number (seconds)");
    x = static_cast<double>(i);
  }
  return x;
}

}  // namespace

CostModel read_cost_model(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element document;
  if (const auto error = parser.load(path).get(document); error != simdjson::SUCCESS)
    throw Error(path + ": cannot read the cost model: " + simdjson::error_message(error));
  simdjson::dom::object object;
  if (document.get_object().get(object) != simdjson::SUCCESS)
    throw Error(path + ": the cost model must be a JSON object with alpha, beta and overhead");
  CostModel model;
  model.alpha = number(object, "alpha", path, true);
  model.beta = number(object, "beta", path, true);
  model.overhead = number(object, "overhead", path, false);
  try {
    check_cost_model(model);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return model;
}

}  // namespace varpack::cli
