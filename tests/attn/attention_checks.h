// Assertions for attention outputs: closeness to the reference with a magnitude-scaled tolerance,
// poison checks (every valid element written, nothing else touched) and bit-for-bit equality.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "attention_problem.h"

namespace varpack::test {

// Is element (t, h, c) of a tensor a real element (a row before valid_rows, not a stride gap)?
template <typename T>
void for_each_slot(const Tensor<T>& x, int64_t valid_rows, auto&& fn) {
  for (int64_t t = 0; t < x.rows; ++t)
    for (int64_t e = 0; e < x.row_stride; ++e) {
      const bool valid = t < valid_rows && e < x.heads * x.dim;
      fn(t, e, valid, x.data[t * x.row_stride + e]);
    }
}

// |got - ref| <= atol * max(max|ref|, 1) + rtol * |ref| on every valid element. Scaling atol by the
// tensor's largest magnitude: rounding error in a float32 sum grows with the size of its terms, not
// of the result, and gradients are sums whose terms cancel. The floor of 1 is the size of the terms
// when the result cancels to 0 (the tests' inputs are standard normal), e.g. dq = 0 exactly when
// every query sees a single key.
template <typename T>
void expect_close(const Tensor<T>& got, const Tensor<T>& ref, int64_t valid_rows, double atol, double rtol,
                  const std::string& name, const std::string& context) {
  double max_ref = 1;
  for_each_slot(ref, valid_rows, [&](int64_t, int64_t, bool valid, T r) {
    if (valid) max_ref = std::max(max_ref, std::abs(static_cast<double>(r)));
  });
  int64_t bad = 0;
  std::string first;
  for (int64_t t = 0; t < valid_rows; ++t)
    for (int64_t e = 0; e < ref.heads * ref.dim; ++e) {
      const double g = got.data[t * got.row_stride + e], r = ref.data[t * ref.row_stride + e];
      const double bound = atol * max_ref + rtol * std::abs(r);
      if (!(std::abs(g - r) <= bound)) {
        if (bad++ == 0)
          first = "row " + std::to_string(t) + " head " + std::to_string(e / ref.dim) + " col " +
                  std::to_string(e % ref.dim) + ": got " + std::to_string(g) + ", reference " + std::to_string(r) +
                  ", bound " + std::to_string(bound);
      }
    }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " elements off, first at " << first << "\n  " << context;
}

inline void expect_lse_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t heads,
                             int64_t total_q, int64_t valid_q, double tol, const std::string& context) {
  int64_t bad = 0;
  std::string first;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < valid_q; ++t) {
      const double g = got[h * total_q + t], r = ref[h * total_q + t];
      const bool ok = std::isinf(r) ? g == r : std::abs(g - r) <= tol * (1 + std::abs(r));
      if (!ok && bad++ == 0)
        first = "head " + std::to_string(h) + " row " + std::to_string(t) + ": got " + std::to_string(g) +
                ", reference " + std::to_string(r);
    }
  EXPECT_EQ(bad, 0) << "lse: " << bad << " entries off, first at " << first << "\n  " << context;
}

// Every valid element written with a finite value, every other element still NaN.
template <typename T>
void expect_written_exactly(const Tensor<T>& x, int64_t valid_rows, const std::string& name,
                            const std::string& context) {
  int64_t unwritten = 0, clobbered = 0;
  for_each_slot(x, valid_rows, [&](int64_t, int64_t, bool valid, T value) {
    if (valid && !std::isfinite(value)) ++unwritten;
    if (!valid && !std::isnan(value)) ++clobbered;
  });
  EXPECT_EQ(unwritten, 0) << name << ": valid elements left non-finite\n  " << context;
  EXPECT_EQ(clobbered, 0) << name << ": elements past the last sequence or in stride gaps were written\n  "
                          << context;
}

inline void expect_lse_written_exactly(const std::vector<float>& lse, int64_t heads, int64_t total_q,
                                       int64_t valid_q, const std::string& context) {
  int64_t unwritten = 0, clobbered = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < total_q; ++t) {
      const float x = lse[h * total_q + t];
      if (t < valid_q && std::isnan(x)) ++unwritten;
      if (t >= valid_q && !std::isnan(x)) ++clobbered;
    }
  EXPECT_EQ(unwritten, 0) << "lse: valid entries left unwritten\n  " << context;
  EXPECT_EQ(clobbered, 0) << "lse: entries past the last sequence were written\n  " << context;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace varpack::test
