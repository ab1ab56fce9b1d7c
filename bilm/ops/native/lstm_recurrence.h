// The LSTM recurrence of bilm's libraries without TensorFlow (portable_kernels.cc on OpenMP's threads,
// xla_kernels.cc on XLA's): lowbit_kernels.h's `Recurrence` with a cell step that computes the logistic
// and tanh itself, in loops the compiler vectorizes, on any `Pool`.

#ifndef BILM_OPS_NATIVE_LSTM_RECURRENCE_H_
#define BILM_OPS_NATIVE_LSTM_RECURRENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "lowbit_kernels.h"

namespace bilm {
namespace {

using lowbit::int64;

// Work below this many cycles runs on the calling thread alone (each library's `Pool`): waking the others would
// cost more.
constexpr int64 kMinParallelCycles = 20000;

// Scratch arrays of a call, kept for the calling thread's next calls: the i-th array a call asks for is
// the i-th of the last call's, grown where it is too small. A large array from the system's allocator
// comes as fresh pages, each zeroed by the kernel on first touch: at the original size that cost more
// than 20 ms a call, about what five steps' products take. Null where there is no memory.
class ReusedScratch {
 public:
  float* operator()(int64 floats) const {
    thread_local std::vector<std::vector<float>> arrays;
    try {
      if (next_ == arrays.size()) arrays.emplace_back();
      std::vector<float>& array = arrays[next_++];
      if (array.size() < static_cast<size_t>(std::max<int64>(floats, 1))) {
        array = std::vector<float>();  // freed before the larger one is taken
        array.resize(std::max<int64>(floats, 1));
      }
      return array.data();
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

 private:
  mutable size_t next_ = 0;
};

// exp(x) for x clipped to [-87, 88] (where float32's exp is a normal number), within 2 ulp: x = k ln 2 + s
// with |s| <= ln 2 / 2, exp(s) by its Taylor series to the 7th power (error below 1e-8), 2^k by the exponent's bits.
inline float Exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // x / ln 2 rounded to the nearest integer by adding and taking away 1.5 * 2^23 (std::floor's call is
  // not vectorized without -fno-trapping-math).
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln 2 in two parts, the first exact in few bits, so that k times it loses nothing.
  const float s = std::fma(k, 2.12194440e-4f, std::fma(k, -0.693359375f, x));
  float p = 1.0f / 5040.0f;
  p = std::fma(p, s, 1.0f / 720.0f);
  p = std::fma(p, s, 1.0f / 120.0f);
  p = std::fma(p, s, 1.0f / 24.0f);
  p = std::fma(p, s, 1.0f / 6.0f);
  p = std::fma(p, s, 0.5f);
  p = std::fma(p, s, 1.0f);
  p = std::fma(p, s, 1.0f);
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float Logistic(float x) { return 1.0f / (1.0f + Exp(-x)); }

// tanh(x): its Taylor series to the 9th power where |x| < 1/4 (error below 1e-8 of the value), else
// 1 - 2 / (exp(2|x|) + 1) with x's sign, which is 1 to float32's precision from |x| = 9 on.
inline float Tanh(float x) {
  const float a = std::min(std::fabs(x), 9.0f);
  const float x2 = x * x;
  float p = 62.0f / 2835.0f;
  p = std::fma(p, x2, -17.0f / 315.0f);
  p = std::fma(p, x2, 2.0f / 15.0f);
  p = std::fma(p, x2, -1.0f / 3.0f);
  const float small = std::fma(p * x2, x, x);
  const float large = std::copysign(1.0f - 2.0f / (Exp(2.0f * a) + 1.0f), x);
  return a < 0.25f ? small : large;
}

// One row's cell step in place (lowbit_kernels.h's `Recurrence` states the contract), in the order of
// TensorFlow's op: the gates' sum g + z, then f * c + i * j, the clip, and o * tanh(c). With a bias b
// (4 * units; null for none), g + b first: the input half x W_x + b, as its caller would have added it.
void CellStep(float* z, const float* g, const float* b, float* c, float* m, int64 units, float cell_clip) {
  if (b != nullptr) {
    for (int64 e = 0; e < 4 * units; ++e) z[e] = (g[e] + b[e]) + z[e];
  } else {
    for (int64 e = 0; e < 4 * units; ++e) z[e] = g[e] + z[e];
  }
  const float* zi = z;
  const float* zj = z + units;
  const float* zf = z + 2 * units;
  const float* zo = z + 3 * units;
  const float clip = cell_clip >= 0 ? cell_clip : INFINITY;
  for (int64 u = 0; u < units; ++u) {
    const float cell = std::min(std::max(Logistic(zf[u] + 1.0f) * c[u] + Logistic(zi[u]) * Tanh(zj[u]), -clip), clip);
    c[u] = cell;
    m[u] = Logistic(zo[u]) * Tanh(cell);
  }
}

// `bilm_lstm_recurrence` (portable_kernels.cc states the contract) on `pool`'s threads (lowbit_kernels.h's
// `Pool`), for kernels of `W` (lowbit_kernels.h's kernel types).
template <typename Pool, typename W>
int LstmRecurrence(const Pool& pool, const float* gates, const int32_t* gate_index, const float* bias,
                   const int32_t* index, const int32_t* active, int64_t steps, int64_t batch, int64_t units,
                   int64_t output_dim, const W* recurrent, const W* projection, float cell_clip, float proj_clip,
                   float* outputs, float* c, float* h) {
  std::fill(outputs, outputs + steps * batch * output_dim, 0.0f);
  const auto cell = [bias](float* z, const float* g, float* c, float* m, int64 units, float cell_clip) {
    CellStep(z, g, bias, c, m, units, cell_clip);
  };
  const bool done = lowbit::Recurrence<W>(
      pool, cell, ReusedScratch{}, gates, gate_index, active, steps, units,
      output_dim, recurrent, nullptr, projection, nullptr, cell_clip, proj_clip, outputs, index, c, h);
  return done ? 0 : 1;
}

}  // namespace
}  // namespace bilm

#endif  // BILM_OPS_NATIVE_LSTM_RECURRENCE_H_
