// Standalone GPU test of the CUDA attention (no torch): random varlen batches through
// attention_forward_cuda / attention_backward_cuda, compared with the double-precision reference
// (attention_forward_reference / attention_backward_reference) on the same 16-bit-rounded inputs;
// each case runs the forward under each launch of --forward (on Hopper: several heads per block in
// both launch orders, a block per work, the persistent kernel on two blocks, then the library's
// own choices; the batches are too small for the library's rules to pick the others), then both
// backward modes (deterministic, and atomic dQ). First, fill_past_end_cuda (counted as one more
// case). Outputs are poisoned (NaN bytes) before each run: every valid row must be written, every
// row past cu_seqlens[-1] left alone.
// Run: ./test_attention_cuda [--forward=NAME,...] [seed [max_cases [first_case]]] (a few cases
// for compute-sanitizer: max_cases from first_case on); exit status 0 = all cases passed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "varpack/attention.h"
#include "varpack/attention_cuda.h"
#include "varpack/error.h"
#include "attn/cuda/forward_launch.h"
#include "check_cuda.h"

namespace {

using varpack::cuda::ForwardLaunch;
using varpack::cuda::ForwardOrder;

// The forward's launches the test runs, by name; "library" last, so that the backward runs on its
// output.
struct NamedLaunch {
  const char* name;
  ForwardLaunch launch;
};
const NamedLaunch kForwardLaunches[] = {
    {"4heads-chunks", {4, ForwardOrder::kByChunks}},
    {"4heads-sequence", {4, ForwardOrder::kBySequence}},
    {"block-per-work", {0, ForwardOrder::kAuto, false}},
    {"two-blocks", {0, ForwardOrder::kAuto, true, 2}},
    {"library", {}},
};

struct Case {
  varpack::DType dtype;
  int head_dim, heads, kv_heads;
  bool causal;
  int64_t window_left, window_right;
  float softcap;
  std::vector<int32_t> q_lens, k_lens;
  // The CUDA params' max_seqlen_q and max_seqlen_k when >= 0: 0 (unknown) or below the longest
  // sequence (understated), which the CUDA kernels must survive (the forward's launch order by
  // chunks takes its count of ranks from max_seqlen_q); -1: the true ones, which the reference
  // requires.
  int64_t gpu_max_seqlen = -1;
  // Scales q: scores of standard deviation q_scale, so that a row's maximum can jump by far more
  // than one tile's spread (the Hopper forward at d256 rescales lazily, only past a jump of 2^8).
  float q_scale = 1.f;
};

uint16_t to_bits(float x, varpack::DType t) {
  if (t == varpack::DType::bf16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    return *reinterpret_cast<const uint16_t*>(&b);
  }
  const __half h = __float2half_rn(x);
  return *reinterpret_cast<const uint16_t*>(&h);
}
double from_bits(uint16_t bits, varpack::DType t) {
  if (t == varpack::DType::bf16) return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&bits));
  return __half2float(*reinterpret_cast<const __half*>(&bits));
}

std::vector<int32_t> cumulative(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

// A device buffer of 16-bit elements filled from a host vector.
struct Device {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit Device(size_t n) : bytes(n) { CHECK_CUDA(cudaMalloc(&ptr, n > 0 ? n : 16)); }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

// ||a - ref|| / ||ref|| over the rows [0, valid_rows) of [rows, width] data, and whether every
// valid element is finite and every row past valid_rows still holds the poison pattern.
struct Compare {
  double rel = 0, max_abs = 0;
  bool finite = true, tail_intact = true;
};
Compare compare(const std::vector<uint16_t>& got, const std::vector<double>& ref, int64_t width,
                int64_t valid_rows, varpack::DType t) {
  Compare c;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / width;
    if (row >= valid_rows) {
      c.tail_intact &= got[i] == 0xFFFF;
      continue;
    }
    const double g = from_bits(got[i], t);
    if (!std::isfinite(g)) c.finite = false;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
    c.max_abs = std::max(c.max_abs, std::abs(g - ref[i]));
  }
  c.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

bool run_case(const Case& cs, const std::vector<NamedLaunch>& launches, std::mt19937& rng,
              int index) {
  const auto cu_q = cumulative(cs.q_lens), cu_k = cumulative(cs.k_lens);
  const int64_t batch = static_cast<int64_t>(cs.q_lens.size());
  const int64_t valid_q = cu_q.back(), valid_k = cu_k.back();
  const int64_t total_q = valid_q + 5, total_k = valid_k + 3;  // rows past the end stay unused
  const int64_t d = cs.head_dim;
  const int64_t wq = cs.heads * d, wk = cs.kv_heads * d;

  std::normal_distribution<float> normal(0.f, 1.f);
  auto random16 = [&](int64_t n, std::vector<double>& as_double, float scale = 1.f) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    as_double.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = to_bits(scale * normal(rng), cs.dtype);
      as_double[i] = from_bits(bits[i], cs.dtype);
    }
    return bits;
  };
  std::vector<double> qd, kd, vd, dod;
  const auto qb = random16(total_q * wq, qd, cs.q_scale), kb = random16(total_k * wk, kd),
             vb = random16(total_k * wk, vd), dob = random16(total_q * wq, dod);

  // Reference in double.
  std::vector<double> ref_out(qd.size()), ref_dq(qd.size()), ref_dk(kd.size()), ref_dv(vd.size());
  std::vector<float> ref_lse(static_cast<size_t>(cs.heads * total_q));
  varpack::AttentionBackwardParams r;
  r.dtype = varpack::DType::f64;
  r.q = qd.data(); r.k = kd.data(); r.v = vd.data(); r.out = ref_out.data(); r.lse = ref_lse.data();
  r.q_row_stride = r.out_row_stride = r.dout_row_stride = r.dq_row_stride = wq;
  r.k_row_stride = r.v_row_stride = r.dk_row_stride = r.dv_row_stride = wk;
  r.q_head_stride = r.k_head_stride = r.v_head_stride = r.out_head_stride = d;
  r.dout_head_stride = r.dq_head_stride = r.dk_head_stride = r.dv_head_stride = d;
  r.lse_head_stride = total_q;
  r.cu_seqlens_q = cu_q.data(); r.cu_seqlens_k = cu_k.data();
  r.batch = batch; r.total_q = total_q; r.total_k = total_k;
  for (int32_t l : cs.q_lens) r.max_seqlen_q = std::max<int64_t>(r.max_seqlen_q, l);
  for (int32_t l : cs.k_lens) r.max_seqlen_k = std::max<int64_t>(r.max_seqlen_k, l);
  r.heads = cs.heads; r.kv_heads = cs.kv_heads; r.head_dim = cs.head_dim;
  r.softmax_scale = 1.f / std::sqrt(static_cast<float>(d));
  r.causal = cs.causal; r.window_left = cs.window_left; r.window_right = cs.window_right;
  r.softcap = cs.softcap;
  r.dout = dod.data(); r.dq = ref_dq.data(); r.dk = ref_dk.data(); r.dv = ref_dv.data();
  varpack::attention_forward_reference(r);
  varpack::attention_backward_reference(r);

  // The same on the GPU.
  Device q(qb.size() * 2), k(kb.size() * 2), v(vb.size() * 2), dout(dob.size() * 2),
      out(qb.size() * 2), dq(qb.size() * 2), dk(kb.size() * 2), dv(vb.size() * 2),
      lse(ref_lse.size() * 4), cuq(cu_q.size() * 4), cuk(cu_k.size() * 4);
  CHECK_CUDA(cudaMemcpy(q.ptr, qb.data(), q.bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(k.ptr, kb.data(), k.bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(v.ptr, vb.data(), v.bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dout.ptr, dob.data(), dout.bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(cuq.ptr, cu_q.data(), cuq.bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(cuk.ptr, cu_k.data(), cuk.bytes, cudaMemcpyHostToDevice));
  for (Device* b : {&out, &dq, &dk, &dv}) CHECK_CUDA(cudaMemset(b->ptr, 0xFF, b->bytes));
  CHECK_CUDA(cudaMemset(lse.ptr, 0xFF, lse.bytes));

  varpack::AttentionBackwardParams g = r;
  g.dtype = cs.dtype;
  g.q = q.ptr; g.k = k.ptr; g.v = v.ptr; g.out = out.ptr; g.lse = static_cast<float*>(lse.ptr);
  g.cu_seqlens_q = static_cast<const int32_t*>(cuq.ptr);
  g.cu_seqlens_k = static_cast<const int32_t*>(cuk.ptr);
  g.dout = dout.ptr; g.dq = dq.ptr; g.dk = dk.ptr; g.dv = dv.ptr;
  if (cs.gpu_max_seqlen >= 0) g.max_seqlen_q = g.max_seqlen_k = cs.gpu_max_seqlen;
  auto fetch = [](const Device& b) {
    std::vector<uint16_t> h(b.bytes / 2);
    CHECK_CUDA(cudaMemcpy(h.data(), b.ptr, b.bytes, cudaMemcpyDeviceToHost));
    return h;
  };
  const double tol = cs.dtype == varpack::DType::bf16 ? 2e-2 : 4e-3;
  char shape[160];
  std::snprintf(shape, sizeof shape,
                "%s d%d h%d/%d causal %d window (%lld,%lld) softcap %.0f batch %lld rows %lld/%lld",
                cs.dtype == varpack::DType::bf16 ? "bf16" : "f16", cs.head_dim, cs.heads,
                cs.kv_heads, cs.causal, static_cast<long long>(cs.window_left),
                static_cast<long long>(cs.window_right), cs.softcap,
                static_cast<long long>(batch), static_cast<long long>(valid_q),
                static_cast<long long>(valid_k));
  // The forward under each launch, out and lse poisoned before each, its workspace too: the
  // launcher must zero the work counter itself.
  bool all_ok = true;
  Compare c_out;
  double lse_err = 0;
  for (const NamedLaunch& named : launches) {
    CHECK_CUDA(cudaMemset(out.ptr, 0xFF, out.bytes));
    CHECK_CUDA(cudaMemset(lse.ptr, 0xFF, lse.bytes));
    Device forward_workspace(varpack::attention_forward_workspace_bytes_cuda(g));
    CHECK_CUDA(cudaMemset(forward_workspace.ptr, 0xFF, forward_workspace.bytes));
    varpack::cuda::attention_forward_cuda(g, forward_workspace.ptr, nullptr, named.launch);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> lse_got(ref_lse.size());
    CHECK_CUDA(cudaMemcpy(lse_got.data(), lse.ptr, lse.bytes, cudaMemcpyDeviceToHost));
    lse_err = 0;
    for (int h = 0; h < cs.heads; ++h)
      for (int64_t i = 0; i < valid_q; ++i) {
        const float a = lse_got[h * total_q + i], b = ref_lse[h * total_q + i];
        if (std::isinf(b)) lse_err = std::max(lse_err, a == b ? 0.0 : INFINITY);
        else lse_err = std::max(lse_err, std::abs(static_cast<double>(a) - b) / (1 + std::abs(b)));
      }
    c_out = compare(fetch(out), ref_out, wq, valid_q, cs.dtype);
    const bool ok = lse_err < 1e-3 && c_out.finite && c_out.tail_intact && c_out.rel < tol;
    std::printf("%s case %d forward %s: %s: out rel %.2e max %.2e%s%s lse %.1e\n",
                ok ? "ok  " : "FAIL", index, named.name, shape, c_out.rel, c_out.max_abs,
                c_out.finite ? "" : " NON-FINITE", c_out.tail_intact ? "" : " TAIL-WRITTEN",
                lse_err);
    all_ok &= ok;
  }
  // Both backward modes on the last forward's results: the 2-pass deterministic one and the
  // atomic-dQ one, each with its own workspace size and freshly poisoned gradients and workspace
  // (NaN: a kernel that relies on a cleared workspace, or skips clearing rows no key block
  // reaches, fails).
  for (const bool deterministic : {true, false}) {
    g.deterministic = deterministic;
    for (Device* b : {&dq, &dk, &dv}) CHECK_CUDA(cudaMemset(b->ptr, 0xFF, b->bytes));
    Device workspace(varpack::attention_backward_workspace_bytes_cuda(g));
    if (workspace.bytes > 0) CHECK_CUDA(cudaMemset(workspace.ptr, 0xFF, workspace.bytes));
    varpack::attention_backward_cuda(g, workspace.ptr, nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    const Compare c_dq = compare(fetch(dq), ref_dq, wq, valid_q, cs.dtype);
    const Compare c_dk = compare(fetch(dk), ref_dk, wk, valid_k, cs.dtype);
    const Compare c_dv = compare(fetch(dv), ref_dv, wk, valid_k, cs.dtype);
    bool ok = lse_err < 1e-3;
    std::string what;
    for (auto [name, c] : {std::pair{"out", c_out}, {"dq", c_dq}, {"dk", c_dk}, {"dv", c_dv}}) {
      const bool good = c.finite && c.tail_intact && c.rel < tol;
      ok &= good;
      char buf[160];
      std::snprintf(buf, sizeof buf, " %s rel %.2e max %.2e%s%s", name, c.rel, c.max_abs,
                    c.finite ? "" : " NON-FINITE", c.tail_intact ? "" : " TAIL-WRITTEN");
      what += buf;
    }
    std::printf("%s case %d %s: %s: lse %.1e%s\n", ok ? "ok  " : "FAIL", index,
                deterministic ? "determ" : "atomic", shape, lse_err, what.c_str());
    all_ok &= ok;
  }
  return all_ok;
}

// fill_past_end_cuda (the torch operator's fill of the rows past cu_seqlens[-1]): in one launch,
// zeros in a [10, 64-byte] tensor's rows 7..9, +inf in rows 7..9 of three lse planes 12 floats
// apart (the 2 floats between planes stay), nothing in a tensor without a tail; every other byte
// keeps its poison. Then the refusals: four regions, and zeros in rows not 16-byte aligned.
bool run_past_end_fill_test() {
  const std::vector<int32_t> cu{0, 4, 7};
  Device cu_dev(cu.size() * 4), rows(10 * 64), lse(3 * 12 * 4), full(7 * 64);
  CHECK_CUDA(cudaMemcpy(cu_dev.ptr, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  for (Device* d : {&rows, &lse, &full}) CHECK_CUDA(cudaMemset(d->ptr, 0x7F, d->bytes));
  const auto* cu_ptr = static_cast<const int32_t*>(cu_dev.ptr);
  varpack::PastEndFill fills[3];
  fills[0] = {rows.ptr, 64, 10, 1, 0, cu_ptr, 2, false};
  fills[1] = {lse.ptr, 4, 10, 3, 12 * 4, cu_ptr, 2, true};
  fills[2] = {full.ptr, 64, 7, 1, 0, cu_ptr, 2, false};
  varpack::fill_past_end_cuda(fills, 3, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> got_rows(rows.bytes), got_full(full.bytes);
  std::vector<float> got_lse(3 * 12);
  CHECK_CUDA(cudaMemcpy(got_rows.data(), rows.ptr, rows.bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(got_full.data(), full.ptr, full.bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(got_lse.data(), lse.ptr, lse.bytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < got_rows.size(); ++i)
    ok &= got_rows[i] == (i / 64 >= 7 ? 0 : 0x7F);
  for (uint8_t b : got_full) ok &= b == 0x7F;
  float poison;
  std::memset(&poison, 0x7F, sizeof poison);
  for (int plane = 0; plane < 3; ++plane)
    for (int i = 0; i < 12; ++i) {
      const float want = i >= 7 && i < 10 ? INFINITY : poison;
      ok &= std::memcmp(&got_lse[plane * 12 + i], &want, sizeof want) == 0;
    }
  auto refused = [&](const varpack::PastEndFill* f, int count) {
    try {
      varpack::fill_past_end_cuda(f, count, nullptr);
    } catch (const varpack::Error&) {
      return true;
    }
    return false;
  };
  const varpack::PastEndFill four[4] = {fills[0], fills[0], fills[0], fills[0]};
  varpack::PastEndFill unaligned = fills[0];
  unaligned.row_bytes = 24;
  ok &= refused(four, 4) && refused(&unaligned, 1);
  std::printf("past-the-end fill: %s\n", ok ? "ok" : "FAILED");
  return ok;
}

// The launches named by --forward=a,b,... (all without it); exits with status 2 on an unknown name.
std::vector<NamedLaunch> forward_launches(const char* list) {
  std::vector<NamedLaunch> chosen;
  if (list == nullptr) return {std::begin(kForwardLaunches), std::end(kForwardLaunches)};
  std::string rest(list);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const auto* found = std::find_if(std::begin(kForwardLaunches), std::end(kForwardLaunches),
                                     [&](const NamedLaunch& n) { return name == n.name; });
    if (found == std::end(kForwardLaunches)) {
      std::fprintf(stderr, "test_attention_cuda: unknown forward launch '%s'; known:", name.c_str());
      for (const NamedLaunch& n : kForwardLaunches) std::fprintf(stderr, " %s", n.name);
      std::fprintf(stderr, "\n");
      std::exit(2);
    }
    chosen.push_back(*found);
  }
  return chosen;
}

}  // namespace

int main(int argc, char** argv) {
  const char* forward_list = nullptr;
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: test_attention_cuda [--forward=NAME,...] [seed [max_cases [first_case]]]\n"
                "forward launches (default all, in this order):");
    for (const NamedLaunch& n : kForwardLaunches) std::printf(" %s", n.name);
    std::printf("\n");
    return 0;
  }
  if (argc > 1 && std::strncmp(argv[1], "--forward=", 10) == 0) {
    forward_list = argv[1] + 10;
    --argc;
    ++argv;
  }
  const std::vector<NamedLaunch> launches = forward_launches(forward_list);
  const unsigned seed = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1234u;
  std::mt19937 rng(seed);
  using varpack::DType;
  // Lengths cover 0, 1, tile edges (63, 64, 65, 127, 128, 129) and q/k lengths that differ.
  const std::vector<int32_t> edges{0, 1, 63, 64, 65, 127, 128, 129, 17, 200};
  std::vector<Case> cases;
  // First, as the sanitizer steps of scripts/gpu_test.sh run the first cases only: sequences of
  // many 128-key tiles, so that the Hopper forward's stage ring wraps around several times.
  const std::vector<int32_t> long_edges{700, 3, 0, 517, 129, 256};
  cases.push_back({DType::bf16, 128, 2, 1, true, -1, -1, 0.f, long_edges, long_edges});
  // At d64 with GQA, with max_seqlen unknown to the CUDA kernels (0); at d128 understated (by
  // chunks, the forward's rank-0 blocks then take several query tiles each).
  cases.push_back({DType::bf16, 64, 4, 2, true, -1, -1, 0.f, long_edges, long_edges, 0});
  cases.push_back({DType::bf16, 128, 2, 1, true, -1, -1, 0.f, long_edges, long_edges, 200});
  for (DType t : {DType::bf16, DType::f16})
    for (int d : {64, 128}) {
      cases.push_back({t, d, 4, 4, false, -1, -1, 0.f, edges, edges});
      cases.push_back({t, d, 4, 2, true, -1, -1, 0.f, edges, edges});
    }
  std::vector<int32_t> kl = edges;
  for (int32_t& l : kl) l = l + 37;
  cases.push_back({DType::bf16, 128, 6, 2, true, -1, -1, 0.f, edges, kl});      // k longer than q
  cases.push_back({DType::bf16, 128, 6, 2, true, -1, -1, 0.f, kl, edges});      // q longer than k
  cases.push_back({DType::bf16, 64, 3, 1, false, 40, 7, 0.f, edges, kl});       // window
  cases.push_back({DType::bf16, 128, 2, 2, true, 100, -1, 0.f, kl, kl});        // causal + window
  cases.push_back({DType::bf16, 128, 2, 1, true, -1, -1, 2.f, kl, kl});         // softcap
  cases.push_back({DType::f16, 64, 8, 1, true, -1, -1, 5.f, {1000, 3, 0, 517}, {1000, 3, 0, 517}});
  cases.push_back({DType::f16, 128, 4, 2, false, -1, -1, 3.f, {1000, 65, 0, 385}, {1000, 65, 0, 385}});
  std::vector<int32_t> long_kl = long_edges;
  for (int32_t& l : long_kl) l = l + 37;
  cases.push_back({DType::bf16, 128, 2, 2, true, 300, -1, 0.f, long_edges, long_kl});  // + window
  // Head dim 64 over many query tiles (128 rows on Hopper): GQA, q longer than k, a window.
  cases.push_back({DType::bf16, 64, 4, 2, true, -1, -1, 0.f, long_edges, long_edges});
  cases.push_back({DType::bf16, 64, 6, 2, true, -1, -1, 0.f, long_kl, long_edges});
  cases.push_back({DType::f16, 64, 2, 1, false, 200, 50, 0.f, long_edges, long_kl});
  // Head dims 96 and 256 (on Hopper the wgmma forward, d96 on d128's tiles; the mma.sync kernels
  // otherwise, where d96 pads its shared-memory rows and d256 splits dK/dV over two warps per 16
  // keys): both dtypes causal and not, with GQA and MQA;
  // then q and k lengths that differ, windows, softcap, and sequences of many tiles.
  for (DType t : {DType::bf16, DType::f16})
    for (int d : {96, 256}) {
      cases.push_back({t, d, 4, 2, false, -1, -1, 0.f, edges, edges});
      cases.push_back({t, d, 4, 1, true, -1, -1, 0.f, edges, edges});
    }
  for (int d : {96, 256}) {
    cases.push_back({DType::bf16, d, 4, 2, true, -1, -1, 0.f, edges, kl});      // k longer than q
    cases.push_back({DType::f16, d, 4, 2, true, -1, -1, 0.f, kl, edges});       // q longer than k
    cases.push_back({DType::f16, d, 4, 1, false, 40, 7, 0.f, edges, kl});       // window
    cases.push_back({DType::bf16, d, 2, 2, true, 100, -1, 0.f, kl, kl});        // causal + window
    cases.push_back({DType::bf16, d, 4, 2, true, -1, -1, 2.f, kl, kl});         // softcap
    cases.push_back({DType::f16, d, 2, 1, false, -1, -1, 3.f, {1000, 65, 0, 385}, {1000, 65, 0, 385}});
  }
  // Cases 42 and 43 (scripts/gpu_test.sh sanitizes 42-46): head dim 64 with a sequence past
  // 4096 queries, where the Hopper forward takes three consumers (192-query tiles, hence lengths at
  // 192's edges): causal; then GQA with a window and softcap (the window keeps the reference quick).
  const std::vector<int32_t> past_4096{4200, 3, 0, 191, 192, 193, 1};
  cases.push_back({DType::bf16, 64, 1, 1, true, -1, -1, 0.f, past_4096, past_4096});
  cases.push_back({DType::f16, 64, 4, 2, true, 256, -1, 5.f, past_4096, past_4096});
  // Scores of standard deviation 6 (a row's maximum jumps by more than 2^8 now and then, where the
  // d256 forward's lazy rescaling takes both branches), at d128, at d64 past 4096 queries, d256.
  cases.push_back({DType::bf16, 128, 2, 1, true, -1, -1, 0.f, long_edges, long_edges, -1, 6.f});
  cases.push_back({DType::bf16, 64, 1, 1, true, -1, -1, 0.f, {4200, 193, 1}, {4200, 193, 1}, -1, 6.f});
  cases.push_back({DType::bf16, 256, 2, 1, true, -1, -1, 0.f, long_edges, long_edges, -1, 6.f});
  const size_t first = argc > 3 ? std::min(cases.size(), static_cast<size_t>(std::atoi(argv[3]))) : 0;
  const size_t count = argc > 2 ? static_cast<size_t>(std::atoi(argv[2])) : cases.size();
  const size_t end = std::min(cases.size(), first + count);
  int failures = run_past_end_fill_test() ? 0 : 1;
  for (size_t i = first; i < end; ++i)
    failures += run_case(cases[i], launches, rng, static_cast<int>(i)) ? 0 : 1;
  std::printf("%s: %d of %zu cases failed (seed %u)\n", failures ? "FAILED" : "PASSED", failures,
              end - first + 1, seed);
  return failures ? 1 : 0;
}
