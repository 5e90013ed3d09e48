// Tiny writers of the token files varpack reads (test inputs only): a .npy file as numpy writes it
// (version 1.0 header padded with spaces to a multiple of 64 bytes, ending in a newline), and a
// Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin) laid out byte by byte as its index writer
// does. Raw forms take the header text or bytes as given, so tests can also write broken files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace varpack::testing {

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::string bytes_of_value(T value) {
  return bytes_of(std::vector<T>{value});
}

// An NPY version 1.0 file whose header dict is `dict` (e.g. "{'descr': '<i4', 'fortran_order':
// False, 'shape': (3,), }") followed by `data`.
inline void write_npy_raw(const std::string& path, const std::string& dict, const std::string& data,
                          int major = 1) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  while ((8 + length_bytes + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (size_t i = 0; i < length_bytes; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_file(path, file + header + data);
}

inline std::string npy_dict(const std::string& descr, size_t n, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
         std::to_string(n) + ",), }";
}

template <typename T>
std::string npy_descr();
template <> inline std::string npy_descr<int32_t>() { return "<i4"; }
template <> inline std::string npy_descr<int64_t>() { return "<i8"; }
template <> inline std::string npy_descr<uint16_t>() { return "<u2"; }
template <> inline std::string npy_descr<uint32_t>() { return "<u4"; }

template <typename T>
void write_npy(const std::string& path, const std::vector<T>& values, int major = 1) {
  write_npy_raw(path, npy_dict(npy_descr<T>(), values.size()), bytes_of(values), major);
}

// Samples flat in DATA.npy (element type T) with their offsets in DATA.offsets.npy.
template <typename T>
void write_npy_samples(const std::string& tokens_path, const std::string& offsets_path,
                       const std::vector<std::vector<int32_t>>& samples) {
  std::vector<T> flat;
  std::vector<int64_t> offsets{0};
  for (const auto& s : samples) {
    for (const int32_t t : s) flat.push_back(static_cast<T>(t));
    offsets.push_back(static_cast<int64_t>(flat.size()));
  }
  write_npy(tokens_path, flat);
  write_npy(offsets_path, offsets);
}

// The bytes of a Megatron index: magic, version, dtype code, counts, the three tables, and
// `modes` (one byte per sequence in multimodal datasets; empty otherwise).
inline std::string megatron_index(uint8_t code, const std::vector<int32_t>& lengths,
                                  const std::vector<int64_t>& pointers, const std::vector<int64_t>& documents,
                                  uint64_t version = 1, const std::string& modes = "") {
  std::string idx("MMIDIDX\0\0", 9);
  idx += bytes_of_value<uint64_t>(version);
  idx += static_cast<char>(code);
  idx += bytes_of_value<uint64_t>(lengths.size());
  idx += bytes_of_value<uint64_t>(documents.size());
  return idx + bytes_of(lengths) + bytes_of(pointers) + bytes_of(documents) + modes;
}

// PREFIX.bin with the samples as T (Megatron dtype `code`) back to back, and PREFIX.idx; one
// document per sample.
template <typename T>
void write_megatron(const std::string& prefix, uint8_t code, const std::vector<std::vector<int32_t>>& samples) {
  std::vector<T> flat;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, documents{0};
  for (const auto& s : samples) {
    pointers.push_back(static_cast<int64_t>(flat.size() * sizeof(T)));
    lengths.push_back(static_cast<int32_t>(s.size()));
    for (const int32_t t : s) flat.push_back(static_cast<T>(t));
    documents.push_back(static_cast<int64_t>(lengths.size()));
  }
  write_file(prefix + ".bin", bytes_of(flat));
  write_file(prefix + ".idx", megatron_index(code, lengths, pointers, documents));
}

}  // namespace varpack::testing
