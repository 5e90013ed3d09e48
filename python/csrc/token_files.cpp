// Binding of the token-file readers (token_files.h): varpack._C.TokenFile, a sequence of
// zero-copy int32 numpy views of its samples with a `lengths` array for the planner, and
// varpack._C.read_tokens, and varpack._C.token_file_lengths (lengths alone). build_packed_batch (module.cpp) uses a TokenFile as its TokenSource
// directly. python/varpack/token_files.py gives them their Python shape.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional for the offsets argument

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "varpack/token_files.h"

namespace py = pybind11;

namespace {

// A read-only 1-D numpy view of `size` values at `data`, keeping `owner` (the TokenFile) alive.
template <typename T>
py::array readonly_view(const T* data, size_t size, const py::object& owner) {
  py::array a(py::dtype::of<T>(), {static_cast<py::ssize_t>(size)}, {}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

varpack::TokenFile read_tokens(const std::string& path, const std::optional<std::string>& offsets) {
  py::gil_scoped_release release;  // the check and conversion scan every token
  return offsets ? varpack::read_npy_tokens(path, *offsets) : varpack::open_token_file(path);
}

}  // namespace

void bind_token_files(py::module_& m) {
  py::class_<varpack::TokenFile>(m, "TokenFile")
      .def("__len__", &varpack::TokenFile::num_samples)
      .def("__getitem__",
           [](py::object self, int64_t sample) {
             const auto& file = self.cast<const varpack::TokenFile&>();
             const int64_t n = file.num_samples();
             if (sample < 0) sample += n;
             if (sample < 0 || sample >= n) {
               throw py::index_error("sample " + std::to_string(sample) + " out of range for " +
                                     std::to_string(n) + " samples");
             }
             const auto ids = file.input_ids(sample);
             return readonly_view(ids.data(), ids.size(), self);
           })
      .def_property_readonly("lengths",
                             [](py::object self) {
                               const auto lengths = self.cast<const varpack::TokenFile&>().lengths();
                               return readonly_view(lengths.data(), lengths.size(), self);
                             })
      .def_property_readonly("num_tokens", &varpack::TokenFile::num_tokens)
      .def_property_readonly("zero_copy", &varpack::TokenFile::zero_copy)
      .def_property_readonly("name", &varpack::TokenFile::name);
  m.def("read_tokens", &read_tokens, py::arg("path"), py::arg("offsets") = py::none());
  m.def("token_file_lengths", [](const std::string& path) {
    std::vector<int64_t> lengths;
    {
      py::gil_scoped_release release;
      lengths = varpack::token_file_lengths(path);
    }
    py::array_t<int64_t> out(static_cast<py::ssize_t>(lengths.size()));
    std::copy(lengths.begin(), lengths.end(), out.mutable_data());
    return out;
  }, py::arg("path"));
}
