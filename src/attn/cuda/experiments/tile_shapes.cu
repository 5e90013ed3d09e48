// Tuning experiment (built only with -DVARPACK_CUDA_EXPERIMENTS=ON, run by scripts/gpu_run.sh):
// times several tile shapes of the forward and of each backward pass on the benchmark's shapes
// (bf16, 16 heads x 128, causal) and checks each against the library's shape (max |difference|),
// so that a shape change in ForwardConfig / DkdvConfig / DqConfig rests on a measurement. The
// backward variants cover both modes (deterministic two-pass, atomic dQ).
// Run: ./tile_shapes [repeats]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/check_cuda.h"

namespace {

using namespace varpack;
using namespace varpack::cuda;
using T = __nv_bfloat16;

float median_ms(const std::function<void()>& f, int repeats) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < repeats; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<uint16_t> fetch(const void* p, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

double max_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x = static_cast<uint32_t>(a[i]) << 16, y = static_cast<uint32_t>(b[i]) << 16;
    float fx, fy;
    std::memcpy(&fx, &x, 4);
    std::memcpy(&fy, &y, 4);
    const double d = std::abs(static_cast<double>(fx) - fy);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

struct Variant {
  std::string name;
  std::function<void(const AttentionBackwardParams&, void*)> run;
  bool forward;
};

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  const int heads = 16, d = 128;
  std::vector<Variant> variants{
      {"fwd 4w x2 n32 (lib)", [](auto& p, void*) { launch_forward_with<T, ForwardTile<128, 4, 2, 32>>(p, nullptr); }, true},
      {"fwd 4w x1 n64", [](auto& p, void*) { launch_forward_with<T, ForwardTile<128, 4, 1, 64>>(p, nullptr); }, true},
      {"fwd 8w x1 n32", [](auto& p, void*) { launch_forward_with<T, ForwardTile<128, 8, 1, 32>>(p, nullptr); }, true},
      {"fwd 8w x2 n32", [](auto& p, void*) { launch_forward_with<T, ForwardTile<128, 8, 2, 32>>(p, nullptr); }, true},
      {"fwd 4w x2 n16", [](auto& p, void*) { launch_forward_with<T, ForwardTile<128, 4, 2, 16>>(p, nullptr); }, true},
      {"bwd dkdv 4w q32 + dq 4w k16 (lib)", [](auto& p, void* ws) { launch_backward_with<T, DkdvTile<128, 4, 32>, DqTile<128, 4, 16>>(p, ws, nullptr); }, false},
      {"bwd dkdv 4w q32 + dq 4w k32", [](auto& p, void* ws) { launch_backward_with<T, DkdvTile<128, 4, 32>, DqTile<128, 4, 32>>(p, ws, nullptr); }, false},
      // The non-deterministic mode: dK/dV kernel adding dQ with fp32 reductions (max|diff| against
      // the deterministic library shape: the order of the dQ sums differs).
      {"bwd atomic 4w q32 (lib)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 4, 32>>(p, ws, nullptr); }, false},
      {"bwd atomic 8w q32", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 8, 32>>(p, ws, nullptr); }, false},
      {"bwd atomic 4w q16", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 4, 16>>(p, ws, nullptr); }, false},
  };
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
  };
  std::vector<Point> points{{"64x1k", std::vector<int32_t>(64, 1024)},
                            {"16x4k", std::vector<int32_t>(16, 4096)},
                            {"4x16k", std::vector<int32_t>(4, 16384)},
                            {"mixed", {4096, 300, 2000, 17, 1024, 3000, 129, 777, 4096, 64}}};
  const int64_t rows = 65536, elems = rows * heads * d;
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv, *ws;
  float* lse;
  int32_t* cu;
  for (void** p : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) CHECK_CUDA(cudaMalloc(p, elems * 2));
  CHECK_CUDA(cudaMalloc(&lse, heads * rows * 4));
  {
    // Sized for the atomic mode at the most rows: Delta, then the fp32 dQ accumulator.
    AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = d;
    sized.total_q = rows;
    CHECK_CUDA(cudaMalloc(&ws, delta_workspace_bytes(sized) + dq_accum_workspace_bytes(sized)));
  }
  CHECK_CUDA(cudaMalloc(&cu, 1024 * 4));
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<uint16_t> h(static_cast<size_t>(elems));
    for (void* p : {q, k, v, dout}) {
      for (auto& x : h) {
        const float f = normal(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        x = static_cast<uint16_t>(bits >> 16);
      }
      CHECK_CUDA(cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice));
    }
  }
  std::printf("%-36s %-7s %9s %9s %12s\n", "variant", "point", "ms", "TFLOP/s", "max|diff|");
  for (const Point& pt : points) {
    std::vector<int32_t> cu_h{0};
    double flops = 0;
    for (int32_t l : pt.lens) {
      cu_h.push_back(cu_h.back() + l);
      flops += 4.0 * heads * d * static_cast<double>(l) * l / 2;
    }
    CHECK_CUDA(cudaMemcpy(cu, cu_h.data(), cu_h.size() * 4, cudaMemcpyHostToDevice));
    AttentionBackwardParams p;
    p.dtype = DType::bf16;
    p.q = q; p.k = k; p.v = v; p.out = out; p.lse = lse;
    p.dout = dout; p.dq = dq; p.dk = dk; p.dv = dv;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = heads * d;
    p.dout_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = heads * d;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = d;
    p.dout_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = d;
    p.total_q = p.total_k = cu_h.back();
    p.lse_head_stride = p.total_q;
    p.cu_seqlens_q = p.cu_seqlens_k = cu;
    p.batch = static_cast<int64_t>(pt.lens.size());
    p.max_seqlen_q = p.max_seqlen_k = *std::max_element(pt.lens.begin(), pt.lens.end());
    p.heads = p.kv_heads = heads;
    p.head_dim = d;
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(d));
    p.causal = true;
    const int64_t n = p.total_q * heads * d;
    std::vector<uint16_t> ref_out, ref_grads;
    for (const Variant& var : variants) {
      const float ms = median_ms([&] { var.run(p, ws); }, repeats);
      CHECK_CUDA(cudaDeviceSynchronize());
      // The library's forward output (and lse) feed every backward variant.
      if (!var.forward && ref_grads.empty())
        launch_forward_with<T, ForwardTile<128, 4, 2, 32>>(p, nullptr);
      if (!var.forward) var.run(p, ws);
      CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<uint16_t> got = var.forward ? fetch(out, n) : fetch(dq, n);
      if (!var.forward) {
        const auto a = fetch(dk, n), b = fetch(dv, n);
        got.insert(got.end(), a.begin(), a.end());
        got.insert(got.end(), b.begin(), b.end());
      }
      std::vector<uint16_t>& ref = var.forward ? ref_out : ref_grads;
      if (ref.empty()) ref = got;
      std::printf("%-36s %-7s %9.3f %9.1f %12.3e\n", var.name.c_str(), pt.name.c_str(), ms,
                  (var.forward ? 1.0 : 2.5) * flops / ms / 1e9, max_diff(ref, got));
    }
  }
  return 0;
}
