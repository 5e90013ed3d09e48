// varpack._C.ArrowTokens: the samples of Arrow data (python/varpack/arrow_tokens.py checks and
// converts them) as a TokenSource. Its int32 chunks are numpy arrays, views of Arrow's own value
// buffers where the ids were int32 already, so a chunked table is served without concatenating
// it: each sample keeps a pointer into its chunk. build_packed_batch (module.cpp) reads it
// directly, like a TokenFile.
#include "arrow_tokens.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>

#include "varpack/error.h"

namespace py = pybind11;

namespace {

using Int32Array = py::array_t<int32_t, py::array::c_style>;

// A read-only 1-D numpy view of `size` values at `data`, keeping `owner` alive.
template <typename T>
py::array readonly_view(const T* data, size_t size, const py::object& owner) {
  py::array a(py::dtype::of<T>(), {static_cast<py::ssize_t>(size)}, {}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// Sets each sample's pointer into `chunks` (one int32 array per chunk, rows back to back).
void point_into(const std::string& name, const char* what, const py::list& chunks,
                const std::vector<int64_t>& rows, const std::vector<int64_t>& lengths,
                std::vector<const int32_t*>& out) {
  out.resize(lengths.size());
  size_t sample = 0;
  for (size_t c = 0; c < rows.size(); ++c) {
    const auto array = chunks[c].cast<Int32Array>();
    const int32_t* next = array.data();
    int64_t used = 0;
    for (int64_t r = 0; r < rows[c]; ++r, ++sample) {
      out[sample] = next;
      next += lengths[sample];
      used += lengths[sample];
    }
    if (used != array.size()) {
      throw varpack::Error(name + ": " + what + " chunk " + std::to_string(c) + " holds " +
                           std::to_string(array.size()) + " values for rows of " + std::to_string(used));
    }
  }
}

}  // namespace

ArrowTokens::ArrowTokens(std::string name, py::list ids, py::object labels, std::vector<int64_t> rows,
                         std::vector<int64_t> lengths, bool zero_copy)
    : name_(std::move(name)), ids_chunks_(std::move(ids)), labels_chunks_(std::move(labels)),
      lengths_(std::move(lengths)), zero_copy_(zero_copy) {
  if (ids_chunks_.size() != rows.size()) throw varpack::Error(name_ + ": one row count per chunk expected");
  int64_t total_rows = 0;
  for (const int64_t r : rows) total_rows += r;
  if (total_rows != static_cast<int64_t>(lengths_.size())) {
    throw varpack::Error(name_ + ": " + std::to_string(lengths_.size()) + " lengths for " +
                         std::to_string(total_rows) + " rows");
  }
  for (const int64_t n : lengths_) num_tokens_ += n;
  point_into(name_, "input_ids", ids_chunks_, rows, lengths_, ids_);
  if (!labels_chunks_.is_none()) point_into(name_, "labels", labels_chunks_, rows, lengths_, labels_);
}

void bind_arrow_tokens(py::module_& m) {
  py::class_<ArrowTokens>(m, "ArrowTokens")
      .def(py::init<std::string, py::list, py::object, std::vector<int64_t>, std::vector<int64_t>, bool>(),
           py::arg("name"), py::arg("ids"), py::arg("labels"), py::arg("rows"), py::arg("lengths"),
           py::arg("zero_copy"))
      .def("__len__", &ArrowTokens::num_samples)
      .def("__getitem__",
           [](py::object self, int64_t sample) -> py::object {
             const auto& tokens = self.cast<const ArrowTokens&>();
             const int64_t n = tokens.num_samples();
             if (sample < 0) sample += n;
             if (sample < 0 || sample >= n) {
               throw py::index_error("sample " + std::to_string(sample) + " out of range for " +
                                     std::to_string(n) + " samples");
             }
             const auto ids = tokens.input_ids(sample);
             py::array view = readonly_view(ids.data(), ids.size(), self);
             if (!tokens.has_labels()) return view;
             const auto labels = tokens.labels(sample);
             py::dict d;
             d["input_ids"] = view;
             d["labels"] = readonly_view(labels.data(), labels.size(), self);
             return d;
           })
      .def_property_readonly("lengths",
                             [](py::object self) {
                               const auto& lengths = self.cast<const ArrowTokens&>().lengths();
                               return readonly_view(lengths.data(), lengths.size(), self);
                             })
      .def_property_readonly("num_tokens", &ArrowTokens::num_tokens)
      .def_property_readonly("zero_copy", &ArrowTokens::zero_copy)
      .def_property_readonly("has_labels", &ArrowTokens::has_labels)
      .def_property_readonly("name", &ArrowTokens::name);
}
