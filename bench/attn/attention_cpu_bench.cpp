// CPU attention benchmark: varpack's varlen forward and backward against the padded dense peer in
// the same run, at a series of padding rates. Prints a markdown table: times (median of --repeats
// after a warm-up), useful GFLOP/s (4 * heads * d * sum(len^2), halved for causal, x2.5 for the
// backward) and the time saved by not computing the padding.
//   attention_cpu_bench [--batch 8] [--seq-len 1024] [--heads 8] [--kv-heads 8] [--head-dim 64]
//                       [--causal 0|1] [--threads 0] [--repeats 3] [--seed 1] [--rate PERCENT] [--bf16 0|1]
// --rate runs one padding rate instead of the series. --bf16 1 also times the varlen forward and
// backward on bf16 copies of the same tensors (bf16 in and out, float accumulation), in the same
// rounds as the float32 peer, and reports bf16 / float32 time ratios. VARPACK_CPU_ISA=x86-64-v3|baseline measures
// a lower instruction-set level.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attn/cpu/tiling.h"
#include "padded_attention.h"
#include "varpack/attention.h"

namespace {

struct Options {
  int64_t batch = 8, seq_len = 1024;
  int heads = 8, kv_heads = 8, head_dim = 64, threads = 0, repeats = 3;
  bool causal = false, bf16 = false;
  uint32_t seed = 1;
  std::vector<double> rates = {0.03, 0.10, 0.25, 0.50, 0.75, 0.90};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (key == "--batch") o.batch = value;
    else if (key == "--seq-len") o.seq_len = value;
    else if (key == "--heads") o.heads = static_cast<int>(value);
    else if (key == "--kv-heads") o.kv_heads = static_cast<int>(value);
    else if (key == "--head-dim") o.head_dim = static_cast<int>(value);
    else if (key == "--causal") o.causal = value != 0;
    else if (key == "--threads") o.threads = static_cast<int>(value);
    else if (key == "--repeats") o.repeats = static_cast<int>(value);
    else if (key == "--seed") o.seed = static_cast<uint32_t>(value);
    else if (key == "--rate") o.rates = {value / 100.0};
    else if (key == "--bf16") o.bf16 = value != 0;
    else {
      std::fprintf(stderr, "attention_cpu_bench: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return o;
}

double cpu_seconds() {  // all threads of the process
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wall_ms, cpu_ms;  // medians
};

// Median wall-clock and CPU time of each function. The functions run alternately (a warm-up round,
// then `repeats` rounds), so on a shared machine a burst of outside load hits every peer alike; CPU
// time (summed over threads) is the work done, which outside load does not inflate.
std::vector<Timing> measure(int repeats, const std::vector<std::function<void()>>& fns) {
  for (const auto& fn : fns) fn();  // warm-up: page faults, thread start-up, instruction caches
  std::vector<std::vector<double>> wall(fns.size()), cpu(fns.size());
  for (int r = 0; r < repeats; ++r)
    for (size_t f = 0; f < fns.size(); ++f) {
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      wall[f].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      cpu[f].push_back(1e3 * (cpu_seconds() - c0));
    }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::vector<Timing> out;
  for (size_t f = 0; f < fns.size(); ++f) out.push_back({median(wall[f]), median(cpu[f])});
  return out;
}

// Lengths spread evenly over a uniform distribution with mean (1 - rate) * L (quantiles, shuffled),
// so the padding rate hits its target even for small batches.
std::vector<int32_t> draw_lengths(const Options& o, double rate, std::mt19937& rng) {
  const double mean = (1 - rate) * o.seq_len;
  const double lo = rate <= 0.5 ? o.seq_len - 2 * rate * o.seq_len : 1;
  const double hi = rate <= 0.5 ? o.seq_len : 2 * mean - 1;
  std::vector<int32_t> lengths(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) {
    const double x = lo + (hi - lo) * (i + 0.5) / o.batch;
    lengths[i] = static_cast<int32_t>(std::clamp<double>(std::round(x), 1, o.seq_len));
  }
  std::shuffle(lengths.begin(), lengths.end(), rng);
  return lengths;
}

// float -> bf16 bits, round to nearest even (the inputs are finite).
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  std::transform(x.begin(), x.end(), y.begin(), [](float e) { return to_bf16(e); });
  return y;
}

// The attention tensors of one layout: THD rows, with cu_seqlens; bf16 copies when asked.
struct Layout {
  std::vector<int32_t> cu;
  std::vector<float> q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse, lse_bf16;
  std::vector<uint16_t> q_bf16, k_bf16, v_bf16, out_bf16, dout_bf16, dq_bf16, dk_bf16, dv_bf16;
  int64_t rows = 0, max_len = 0;

  Layout(const Options& o, const std::vector<int32_t>& lengths, std::mt19937& rng) {
    cu = {0};
    for (int32_t l : lengths) {
      cu.push_back(cu.back() + l);
      max_len = std::max<int64_t>(max_len, l);
    }
    rows = cu.back();
    std::normal_distribution<float> normal;
    auto random = [&](int64_t n) {
      std::vector<float> x(n);
      for (float& e : x) e = normal(rng);
      return x;
    };
    q = random(rows * o.heads * o.head_dim);
    k = random(rows * o.kv_heads * o.head_dim);
    v = random(rows * o.kv_heads * o.head_dim);
    dout = random(rows * o.heads * o.head_dim);
    out.assign(q.size(), 0);
    dq.assign(q.size(), 0);
    dk.assign(k.size(), 0);
    dv.assign(v.size(), 0);
    lse.assign(rows * o.heads, 0);
    if (o.bf16) {
      q_bf16 = to_bf16(q);
      k_bf16 = to_bf16(k);
      v_bf16 = to_bf16(v);
      dout_bf16 = to_bf16(dout);
      out_bf16.assign(q.size(), 0);
      dq_bf16.assign(q.size(), 0);
      dk_bf16.assign(k.size(), 0);
      dv_bf16.assign(v.size(), 0);
      lse_bf16.assign(lse.size(), 0);
    }
  }

  // The same problem on the bf16 copies (same layout in elements).
  varpack::AttentionBackwardParams params_bf16(const Options& o) {
    varpack::AttentionBackwardParams p = params(o);
    p.dtype = varpack::DType::bf16;
    p.q = q_bf16.data();
    p.k = k_bf16.data();
    p.v = v_bf16.data();
    p.out = out_bf16.data();
    p.lse = lse_bf16.data();
    p.dout = dout_bf16.data();
    p.dq = dq_bf16.data();
    p.dk = dk_bf16.data();
    p.dv = dv_bf16.data();
    return p;
  }

  varpack::AttentionBackwardParams params(const Options& o) {
    varpack::AttentionBackwardParams p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.out = out.data();
    p.lse = lse.data();
    p.dout = dout.data();
    p.dq = dq.data();
    p.dk = dk.data();
    p.dv = dv.data();
    p.q_row_stride = p.out_row_stride = p.dout_row_stride = p.dq_row_stride = int64_t{o.heads} * o.head_dim;
    p.k_row_stride = p.v_row_stride = p.dk_row_stride = p.dv_row_stride = int64_t{o.kv_heads} * o.head_dim;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = p.dout_head_stride =
        p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = o.head_dim;
    p.lse_head_stride = rows;
    p.cu_seqlens_q = p.cu_seqlens_k = cu.data();
    p.batch = static_cast<int64_t>(cu.size()) - 1;
    p.total_q = p.total_k = rows;
    p.max_seqlen_q = p.max_seqlen_k = max_len;
    p.heads = o.heads;
    p.kv_heads = o.kv_heads;
    p.head_dim = o.head_dim;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
    p.causal = o.causal;
    return p;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("# batch %lld x L %lld, heads %d (kv %d), head_dim %d, %s, float32, %d threads, median of %d, "
              "kernels %s\n\n",
              static_cast<long long>(o.batch), static_cast<long long>(o.seq_len), o.heads, o.kv_heads, o.head_dim,
              o.causal ? "causal" : "not causal", threads, o.repeats, varpack::cpu::cpu_kernels().isa);
  std::printf("Times are medians, wall-clock / CPU (all threads); savings = 1 - varlen / padded on each.\n\n");
  std::printf("| padding | varlen fwd ms | padded fwd ms | fwd saving | varlen fwd GFLOP/s | varlen bwd ms "
              "| padded bwd ms | bwd saving | varlen bwd GFLOP/s | max abs out diff |%s\n",
              o.bf16 ? " bf16 fwd ms | bf16 / f32 fwd | bf16 bwd ms | bf16 / f32 bwd |" : "");
  std::printf("|---|---|---|---|---|---|---|---|---|---|%s\n", o.bf16 ? "---|---|---|---|" : "");
  std::mt19937 rng(o.seed);
  for (const double rate : o.rates) {
    const std::vector<int32_t> lengths = draw_lengths(o, rate, rng);
    double sum_len = 0, sum_sq = 0;
    for (int32_t l : lengths) {
      sum_len += l;
      sum_sq += static_cast<double>(l) * l;
    }
    const double actual_rate = 1 - sum_len / (o.batch * o.seq_len);
    const double flops = 4.0 * o.heads * o.head_dim * sum_sq * (o.causal ? 0.5 : 1.0);

    Layout packed(o, lengths, rng);
    Layout padded(o, std::vector<int32_t>(o.batch, static_cast<int32_t>(o.seq_len)), rng);
    // The padded batch holds the packed tokens at the start of each row of L.
    const int64_t qw = int64_t{o.heads} * o.head_dim, kw = int64_t{o.kv_heads} * o.head_dim;
    for (int64_t b = 0; b < o.batch; ++b) {
      const int64_t src = packed.cu[b], dst = b * o.seq_len, n = lengths[b];
      std::copy_n(&packed.q[src * qw], n * qw, &padded.q[dst * qw]);
      std::copy_n(&packed.k[src * kw], n * kw, &padded.k[dst * kw]);
      std::copy_n(&packed.v[src * kw], n * kw, &padded.v[dst * kw]);
    }
    varpack::AttentionBackwardParams vp = packed.params(o), rect = padded.params(o);
    varpack::bench::PaddedBatch pb{padded.q.data(), padded.k.data(), padded.v.data(), padded.out.data(), lengths,
                                   o.seq_len, o.heads, o.kv_heads, o.head_dim, o.causal};

    // The padded backward: the same kernel over the full L x L rectangle of every row, which is the
    // work a dense backward does (a key mask changes values, not cost).
    varpack::attention_forward_cpu(rect, threads);
    std::vector<std::function<void()>> peers = {[&] { varpack::attention_forward_cpu(vp, threads); },
                                                [&] { varpack::bench::padded_attention_forward(pb, threads); },
                                                [&] { varpack::attention_backward_cpu(vp, threads); },
                                                [&] { varpack::attention_backward_cpu(rect, threads); }};
    varpack::AttentionBackwardParams vp_bf16;
    if (o.bf16) {
      vp_bf16 = packed.params_bf16(o);
      peers.push_back([&] { varpack::attention_forward_cpu(vp_bf16, threads); });
      peers.push_back([&] { varpack::attention_backward_cpu(vp_bf16, threads); });
    }
    const std::vector<Timing> t = measure(o.repeats, peers);

    double max_diff = 0;  // the two forwards agree on the real tokens
    varpack::bench::padded_attention_forward(pb, threads);
    for (int64_t b = 0; b < o.batch; ++b)
      for (int64_t e = 0; e < lengths[b] * qw; ++e)
        max_diff = std::max<double>(
            max_diff, std::abs(packed.out[packed.cu[b] * qw + e] - padded.out[b * o.seq_len * qw + e]));

    auto saving = [](const Timing& varlen, const Timing& padded) {
      return std::to_string(static_cast<int>(std::lround(100 * (1 - varlen.wall_ms / padded.wall_ms)))) + "% / " +
             std::to_string(static_cast<int>(std::lround(100 * (1 - varlen.cpu_ms / padded.cpu_ms)))) + "%";
    };
    std::printf("| %.1f%% | %.1f / %.1f | %.1f / %.1f | %s | %.0f | %.1f / %.1f | %.1f / %.1f | %s | %.0f | %.0e |",
                100 * actual_rate, t[0].wall_ms, t[0].cpu_ms, t[1].wall_ms, t[1].cpu_ms, saving(t[0], t[1]).c_str(),
                flops / t[0].wall_ms / 1e6, t[2].wall_ms, t[2].cpu_ms, t[3].wall_ms, t[3].cpu_ms,
                saving(t[2], t[3]).c_str(), 2.5 * flops / t[2].wall_ms / 1e6, max_diff);
    if (o.bf16)
      std::printf(" %.1f / %.1f | %.2f / %.2f | %.1f / %.1f | %.2f / %.2f |", t[4].wall_ms, t[4].cpu_ms,
                  t[4].wall_ms / t[0].wall_ms, t[4].cpu_ms / t[0].cpu_ms, t[5].wall_ms, t[5].cpu_ms,
                  t[5].wall_ms / t[2].wall_ms, t[5].cpu_ms / t[2].cpu_ms);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
