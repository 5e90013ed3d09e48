// varpack._C: Python bindings of the planner (pack.h), the rank balancer (balance.h) and the batch
// builder (batch.h). They only
// convert: numpy arrays in, numpy views / torch tensors out, varpack::Error -> ValueError with the
// same message. python/varpack/packing.py gives them their Python shape. (The attention operators
// are registered with torch in attention_op.cpp, loaded with this module.)
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arrow_tokens.h"
#include "varpack/balance.h"
#include "varpack/batch.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/token_files.h"

namespace py = pybind11;

void bind_token_files(py::module_& m);  // token_files.cpp

namespace {

using Int32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// A Python sequence of samples as a TokenSource. A sample is a 1-D sequence of token ids, or a
// mapping with "input_ids" and optionally "labels". Samples are fetched and converted to int32 on
// first use and kept, so building a few rows of a large dataset touches only the samples in them
// and the copies happen in numpy, not in a Python loop over tokens. Runs with the GIL held.
class SequenceTokenSource final : public varpack::TokenSource {
 public:
  explicit SequenceTokenSource(py::sequence samples)
      : samples_(std::move(samples)), size_(static_cast<int64_t>(py::len(samples_))) {}

  int64_t num_samples() const override { return size_; }
  std::span<const int32_t> input_ids(int64_t sample) const override { return view(fetch(sample).input_ids); }
  std::span<const int32_t> labels(int64_t sample) const override { return view(fetch(sample).labels); }

 private:
  struct Sample {
    Int32Array input_ids;
    Int32Array labels;  // empty: the sample has no labels of its own
  };

  static std::span<const int32_t> view(const Int32Array& a) {
    return {a.data(), static_cast<size_t>(a.size())};
  }

  [[noreturn]] static void out_of_range(int64_t sample, const char* what, py::ssize_t index,
                                        const std::string& value, bool labels) {
    throw py::value_error("sample " + std::to_string(sample) + ": " + what + "[" + std::to_string(index) +
                          "] is " + value + "; " + what + " must be integers in [0, 2147483647]" +
                          (labels ? " or -100 (ignored)" : ""));
  }

  // Every value is checked before the narrowing to int32, which would wrap it (2^31 became
  // -2^31, 2^32 + 7 became 7, uint64 2^63 became 0).
  template <typename T>
  static void check_ids(const py::array& raw, int64_t sample, const char* what, bool labels) {
    const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(raw);
    const T* v = a.data();
    for (py::ssize_t i = 0; i < a.size(); ++i) {
      bool in_range = v[i] <= T{2147483647};
      if constexpr (std::is_signed_v<T>) in_range = in_range && (v[i] >= 0 || (labels && v[i] == -100));
      if (!in_range) out_of_range(sample, what, i, std::to_string(v[i]), labels);
    }
  }

  static Int32Array to_ids(const py::handle& obj, int64_t sample, const char* what) {
    const py::array raw = py::array::ensure(obj);
    // Casting floats or booleans to token ids would silently change them; an empty list is
    // float64 to numpy and fine. Python ints beyond 64 bits make an object array.
    const char kind = raw ? raw.dtype().kind() : '?';
    if (!raw || (kind != 'i' && kind != 'u' && raw.size() > 0)) {
      throw py::value_error("sample " + std::to_string(sample) + ": " + what + " must hold integer token ids, got " +
                            (raw ? "dtype " + std::string(py::str(raw.dtype())) : std::string(py::str(py::type::of(obj)))) +
                            (kind == 'O' ? " (integers beyond 64 bits?); ids must be in [0, 2147483647]" : ""));
    }
    if (raw.ndim() != 1) {
      throw py::value_error("sample " + std::to_string(sample) + ": " + what + " must be 1-D, got " +
                            std::to_string(raw.ndim()) + " dimensions");
    }
    const bool labels = std::string_view(what) == "labels";
    if (kind == 'u') {
      check_ids<uint64_t>(raw, sample, what, labels);
    } else if (kind == 'i') {
      check_ids<int64_t>(raw, sample, what, labels);
    }
    return Int32Array::ensure(raw);
  }

  const Sample& fetch(int64_t sample) const {
    auto found = cache_.find(sample);
    if (found != cache_.end()) return found->second;
    const py::object obj = samples_[py::int_(sample)];
    Sample s;
    if (py::hasattr(obj, "keys")) {
      if (!obj.contains("input_ids")) {
        throw py::value_error("sample " + std::to_string(sample) + " is a mapping without \"input_ids\"");
      }
      s.input_ids = to_ids(obj["input_ids"], sample, "input_ids");
      if (obj.contains("labels") && !obj["labels"].is_none()) {
        s.labels = to_ids(obj["labels"], sample, "labels");
      }
    } else {
      s.input_ids = to_ids(obj, sample, "input_ids");
    }
    if (s.labels.ptr() == nullptr) s.labels = Int32Array(0);
    return cache_.emplace(sample, std::move(s)).first->second;
  }

  py::sequence samples_;
  int64_t size_;
  mutable std::unordered_map<int64_t, Sample> cache_;
};

// A read-only numpy view of `data` that keeps `owner` (the PackPlan) alive.
template <typename T>
py::array view_of(const T* data, std::vector<py::ssize_t> shape, const py::object& owner) {
  py::array a(py::dtype::of<T>(), std::move(shape), {}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// A property getter: the 1-D read-only view of the vector `member` of the bound object.
template <typename Owner, typename T>
auto vector_view(std::vector<T> Owner::*member) {
  return [member](py::object self) {
    const std::vector<T>& v = self.cast<const Owner&>().*member;
    return view_of(v.data(), {static_cast<py::ssize_t>(v.size())}, self);
  };
}

// A copy of `v` as a 1-D tensor of element type Out. One plain loop on purpose: torch's own
// conversion runs on its thread pool, which stalls for tens of milliseconds when the cores are busy
// (a data loader next to training) and gains nothing on a copy this size.
template <typename Out, typename T>
torch::Tensor tensor_of(const std::vector<T>& v) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(v.size())}, torch::CppTypeToScalarType<Out>::value);
  std::copy(v.begin(), v.end(), t.data_ptr<Out>());
  return t;
}

py::dict stats_dict(const varpack::PlanStats& s) {
  py::dict d;
  d["samples"] = s.samples;
  d["tokens"] = s.tokens;
  d["rows"] = s.rows;
  d["capacity"] = s.capacity;
  d["lower_bound_rows"] = s.lower_bound_rows;
  d["padded_tokens"] = s.padded_tokens;
  d["padding_rate_packed"] = s.padding_rate_packed;
  d["padding_rate_unpacked"] = s.padding_rate_unpacked;
  d["truncated_tokens"] = s.truncated_tokens;
  d["skipped_samples"] = s.skipped_samples;
  d["split_samples"] = s.split_samples;
  d["context_parallel_samples"] = s.context_parallel_samples;
  d["gap_to_lower_bound"] = s.gap_to_lower_bound();
  return d;
}

varpack::PlanStats stats_from(const py::dict& d) {
  varpack::PlanStats s;
  s.samples = d["samples"].cast<int64_t>();
  s.tokens = d["tokens"].cast<int64_t>();
  s.rows = d["rows"].cast<int64_t>();
  s.capacity = d["capacity"].cast<int64_t>();
  s.lower_bound_rows = d["lower_bound_rows"].cast<int64_t>();
  s.padded_tokens = d["padded_tokens"].cast<int64_t>();
  s.padding_rate_packed = d["padding_rate_packed"].cast<double>();
  s.padding_rate_unpacked = d["padding_rate_unpacked"].cast<double>();
  s.truncated_tokens = d["truncated_tokens"].cast<int64_t>();
  s.skipped_samples = d["skipped_samples"].cast<int64_t>();
  s.split_samples = d["split_samples"].cast<int64_t>();
  s.context_parallel_samples = d["context_parallel_samples"].cast<int64_t>();
  return s;
}

template <typename T>
std::vector<T> vector_of(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

// Pickling (DataLoader workers, multiprocessing): the plan's arrays and statistics, copied.
py::tuple plan_state(const varpack::PackPlan& p) {
  py::array_t<int64_t> pieces({static_cast<py::ssize_t>(p.pieces.size()), py::ssize_t{3}});
  std::copy_n(&p.pieces.data()->sample, 3 * p.pieces.size(), pieces.mutable_data());
  return py::make_tuple(pieces, py::array_t<int64_t>(p.row_begin.size(), p.row_begin.data()),
                        py::array_t<int64_t>(p.row_width.size(), p.row_width.data()), stats_dict(p.stats));
}

varpack::PackPlan plan_from_state(const py::tuple& t) {
  using Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  varpack::PackPlan p;
  const std::vector<int64_t> flat = vector_of(t[0].cast<Array>());
  for (size_t i = 0; i + 2 < flat.size(); i += 3) p.pieces.push_back({flat[i], flat[i + 1], flat[i + 2]});
  p.row_begin = vector_of(t[1].cast<Array>());
  p.row_width = vector_of(t[2].cast<Array>());
  p.stats = stats_from(t[3].cast<py::dict>());
  return p;
}

varpack::PackPlan plan_packing(py::array_t<int64_t, py::array::c_style | py::array::forcecast> lengths,
                               int64_t capacity, const std::string& algorithm, const std::string& overlong,
                               int64_t batch_size, bool shuffle_rows, uint64_t seed) {
  varpack::PackOptions options;
  options.capacity = capacity;
  options.algorithm = varpack::parse_algorithm(algorithm);
  options.overlong = varpack::parse_overlong_policy(overlong);
  options.batch_size = batch_size;
  options.shuffle_rows = shuffle_rows;
  options.seed = seed;
  const std::span<const int64_t> span(lengths.data(), static_cast<size_t>(lengths.size()));
  py::gil_scoped_release release;  // planning millions of lengths needs no Python
  return varpack::plan_packing(span, options);
}

py::dict balance_stats_dict(const varpack::BalanceStats& s) {
  py::dict d;
  d["rows"] = s.rows;
  d["assigned_rows"] = s.assigned_rows;
  d["dropped_rows"] = s.dropped_rows;
  d["steps"] = s.steps;
  d["partial_step_rows"] = s.partial_step_rows;
  d["round_robin_steps"] = s.round_robin_steps;
  d["total_cost"] = s.total_cost;
  d["step_time"] = s.step_time;
  d["ideal_step_time"] = s.ideal_step_time;
  d["mean_imbalance"] = s.mean_imbalance;
  d["max_imbalance"] = s.max_imbalance;
  return d;
}

py::array_t<double> row_costs(const varpack::PackPlan& plan, double alpha, double beta, double overhead) {
  const std::vector<double> costs = varpack::row_costs(plan, varpack::CostModel{alpha, beta, overhead});
  return py::array_t<double>(static_cast<py::ssize_t>(costs.size()), costs.data());
}

varpack::RankAssignment balance_rows(py::array_t<double, py::array::c_style | py::array::forcecast> costs,
                                     int64_t ranks, int64_t rows_per_rank, bool drop_last,
                                     const std::string& method, int64_t window_steps) {
  varpack::BalanceOptions options;
  options.window_steps = window_steps;
  options.ranks = ranks;
  options.rows_per_rank = rows_per_rank;
  options.drop_last = drop_last;
  options.method = varpack::parse_balance_method(method);
  const std::span<const double> span(costs.data(), static_cast<size_t>(costs.size()));
  py::gil_scoped_release release;
  return varpack::balance_rows(span, options);
}

varpack::PackPlan select_rows(const varpack::PackPlan& plan,
                              py::array_t<int64_t, py::array::c_style | py::array::forcecast> rows) {
  return varpack::select_rows(plan, std::span<const int64_t>(rows.data(), static_cast<size_t>(rows.size())));
}

py::dict build_batch(const varpack::PackPlan& plan, int64_t row_first, int64_t row_last, py::sequence samples,
                     int64_t pad_to_multiple, int32_t pad_token_id, bool restart_positions_per_piece) {
  // A TokenFile (varpack.read_tokens) is a TokenSource already: no Python call per sample.
  std::optional<SequenceTokenSource> sequence;
  const varpack::TokenSource* source = nullptr;
  if (py::isinstance<varpack::TokenFile>(samples)) {
    source = &samples.cast<const varpack::TokenFile&>();
  } else if (py::isinstance<ArrowTokens>(samples)) {
    source = &samples.cast<const ArrowTokens&>();
  } else {
    source = &sequence.emplace(std::move(samples));
  }
  varpack::BatchOptions options;
  options.pad_to_multiple = pad_to_multiple;
  options.pad_token_id = pad_token_id;
  options.restart_positions_per_piece = restart_positions_per_piece;
  const varpack::PackedBatch b = varpack::build_packed_batch(plan, row_first, row_last, *source, options);
  py::dict d;
  // int64 ids and labels: what nn.Embedding and cross_entropy take without another conversion.
  d["input_ids"] = tensor_of<int64_t>(b.input_ids);
  d["labels"] = tensor_of<int64_t>(b.labels);
  d["position_ids"] = tensor_of<int64_t>(b.position_ids);
  d["cu_seqlens"] = tensor_of<int32_t>(b.cu_seqlens);
  d["max_seqlen"] = b.max_seqlen;
  d["segment_sample"] = tensor_of<int64_t>(b.segment_sample);
  d["segment_offset"] = tensor_of<int64_t>(b.segment_offset);
  d["row_offsets"] = tensor_of<int64_t>(b.row_offsets);
  d["loss_weight_per_token"] = tensor_of<float>(b.loss_weight_per_token);
  d["loss_weight_per_sample"] = tensor_of<float>(b.loss_weight_per_sample);
  d["num_samples"] = b.num_samples;
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "varpack C++ core: planner, batch builder (use the varpack package, not this module)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const varpack::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  static_assert(sizeof(varpack::Piece) == 3 * sizeof(int64_t), "pieces are viewed as an [P, 3] int64 array");
  py::class_<varpack::PackPlan>(m, "PackPlan")
      .def_property_readonly("pieces",
                             [](py::object self) {
                               const auto& p = self.cast<const varpack::PackPlan&>();
                               return view_of(&p.pieces.data()->sample,
                                              {static_cast<py::ssize_t>(p.pieces.size()), 3}, self);
                             })
      .def_property_readonly("row_begin",
                             [](py::object self) {
                               const auto& p = self.cast<const varpack::PackPlan&>();
                               return view_of(p.row_begin.data(), {static_cast<py::ssize_t>(p.row_begin.size())},
                                              self);
                             })
      .def_property_readonly("row_width",
                             [](py::object self) {
                               const auto& p = self.cast<const varpack::PackPlan&>();
                               return view_of(p.row_width.data(), {static_cast<py::ssize_t>(p.row_width.size())},
                                              self);
                             })
      .def_property_readonly("stats", [](const varpack::PackPlan& p) { return stats_dict(p.stats); })
      .def("rows", &varpack::PackPlan::rows)
      .def(py::pickle(&plan_state, &plan_from_state))
      .def("__eq__", [](const varpack::PackPlan& a, const varpack::PackPlan& b) { return a == b; });

  py::class_<varpack::RankAssignment>(m, "RankAssignment")
      .def_readonly("ranks", &varpack::RankAssignment::ranks)
      .def_readonly("rows_per_rank", &varpack::RankAssignment::rows_per_rank)
      .def_property_readonly("rows", vector_view(&varpack::RankAssignment::rows))
      .def_property_readonly("rank_begin", vector_view(&varpack::RankAssignment::rank_begin))
      .def_property_readonly("rank_cost",
                             [](py::object self) {
                               const auto& a = self.cast<const varpack::RankAssignment&>();
                               return view_of(a.rank_cost.data(), {a.steps(), a.ranks}, self);
                             })
      .def_property_readonly("step_imbalance", vector_view(&varpack::RankAssignment::step_imbalance))
      .def_property_readonly("stats", [](const varpack::RankAssignment& a) { return balance_stats_dict(a.stats); });

  m.def("algorithm_names", [] { return py::cast(varpack::algorithm_names()); });
  m.def("overlong_policy_names", [] { return py::cast(varpack::overlong_policy_names()); });
  m.attr("MAX_CAPACITY") = varpack::kMaxCapacity;
  m.def("plan_packing", &plan_packing, py::arg("lengths"), py::arg("capacity"), py::arg("algorithm"),
        py::arg("overlong"), py::arg("batch_size"), py::arg("shuffle_rows"), py::arg("seed"));
  m.def("build_packed_batch", &build_batch, py::arg("plan"), py::arg("row_first"), py::arg("row_last"),
        py::arg("samples"), py::arg("pad_to_multiple"), py::arg("pad_token_id"),
        py::arg("restart_positions_per_piece"));
  const varpack::CostModel default_model;
  m.def("row_costs", &row_costs, py::arg("plan"), py::arg("alpha") = default_model.alpha,
        py::arg("beta") = default_model.beta, py::arg("overhead") = default_model.overhead);
  m.def("balance_rows", &balance_rows, py::arg("costs"), py::arg("ranks"), py::arg("rows_per_rank"),
        py::arg("drop_last"), py::arg("method"), py::arg("window_steps"));
  m.def("select_rows", &select_rows, py::arg("plan"), py::arg("rows"));
  bind_token_files(m);
  bind_arrow_tokens(m);
}
