// bilm's CPU kernels for the frameworks other than TensorFlow (PyTorch's
// CPU path, Keras's NumPy backend): lowbit_kernels.h's `Recurrence`, the
// loop TensorFlow's BilmLstmRecurrence op runs, its `Product`, the
// product TensorFlow's BilmLowbitMatmul op runs, and the char CNN's table
// lookups (TensorFlow's table loop) and Philox (TensorFlow's random numbers), behind a C interface that takes plain
// arrays.
// No framework's headers: it runs on OpenMP's worker threads (PyTorch's own
// where PyTorch loaded its OpenMP runtime first, as it does on import), and
// its cell step computes the logistic and tanh itself, in loops the
// compiler vectorizes.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "lowbit_kernels.h"
#include "lstm_recurrence.h"

namespace bilm {
namespace {

using lowbit::int64;

// lowbit_kernels.h's `Pool` on OpenMP's threads, as many as `omp_get_max_threads()` names for the
// calling thread (PyTorch's `torch.set_num_threads`).
struct OpenMpPool {
  int64 Threads() const { return omp_get_max_threads(); }

  template <typename F>
  void Blocks(int64 n, int64 cost, const F& f) const {
    if (n <= 0) return;
    if (Threads() <= 1 || n == 1 || n * cost < kMinParallelCycles) {
      f(0, n);
      return;
    }
#pragma omp parallel
    {
      const int64 count = omp_get_num_threads(), id = omp_get_thread_num();
      const int64 each = (n + count - 1) / count, begin = id * each;
      if (begin < n) f(begin, std::min(n, begin + each));
    }
  }

  template <typename F>
  void Tasks(int64 n, const F& f) const {
    if (n <= 0) return;
    if (Threads() <= 1 || n == 1) {
      f(0, n);
      return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64 i = 0; i < n; ++i) f(i, i + 1);
  }
};

// `bilm_char_max_pooled`: each token's char convolutions max-pooled over its windows, by table lookups. A
// filter of width w sees w char ids, and its value at window p is a sum of table rows, offset k's row of the
// char at p + k, added in the order of the offsets (as TensorFlow's table loop adds them); the max runs over
// the windows in order. A token's values depend on its own ids alone, so they are the same bytes at any
// number of tokens beside it.
void CharMaxPooled(const int32_t* ids, int64 n, int64 columns, const float* tables, const int64_t* widths,
                   const int64_t* nums, int64 n_filters, int64 table_rows, float* out) {
  int64 out_dim = 0, adds = 0, widest = 0;
  for (int64 f = 0; f < n_filters; ++f) {
    out_dim += nums[f];
    widest = std::max<int64>(widest, nums[f]);
    adds += std::max<int64>(columns - widths[f] + 1, 0) * widths[f] * nums[f];
  }
  OpenMpPool{}.Blocks(n, adds, [&](int64 begin, int64 end) {
    std::vector<float> scratch(widest);
    float* __restrict window = scratch.data();
    for (int64 i = begin; i < end; ++i) {
      const int32_t* row = ids + i * columns;
      const float* table = tables;
      float* __restrict maximum = out + i * out_dim;
      for (int64 f = 0; f < n_filters; ++f) {
        const int64 width = widths[f], num = nums[f], positions = columns - width + 1;
        std::fill(maximum, maximum + num, -std::numeric_limits<float>::infinity());
        for (int64 p = 0; p < positions; ++p) {
          const float* __restrict first = table + static_cast<int64>(row[p]) * width * num;
          for (int64 j = 0; j < num; ++j) window[j] = first[j];
          for (int64 k = 1; k < width; ++k) {
            const float* __restrict next = table + (static_cast<int64>(row[p + k]) * width + k) * num;
            for (int64 j = 0; j < num; ++j) window[j] += next[j];
          }
          for (int64 j = 0; j < num; ++j) maximum[j] = std::max(maximum[j], window[j]);
        }
        table += table_rows * width * num;
        maximum += num;
      }
    }
  });
}

// `bilm_philox`: Philox-4x32-10 (the stream of TensorFlow's stateless random ops), block i from the 128-bit
// counter plus i; each round multiplies words 0 and 2 by the multipliers and adds the increments to the key. On
// the calling thread alone: with OpenMP's threads a training run on PyTorch took far longer (docs/performance.md).
void Philox(const uint32_t* key, const uint32_t* counter, const uint32_t* multipliers, const uint32_t* increments,
            int64 rounds, int64 n_words, int64_t* out) {
  const int64 n_blocks = (n_words + 3) / 4;
  for (int64 i = 0; i < n_blocks; ++i) {
    // The 128-bit addition of i, a word at a time.
    uint64_t sum = static_cast<uint64_t>(counter[0]) + static_cast<uint64_t>(i);
    uint32_t c[4];
    c[0] = static_cast<uint32_t>(sum);
    for (int w = 1; w < 4; ++w) {
      sum = static_cast<uint64_t>(counter[w]) + (sum >> 32);
      c[w] = static_cast<uint32_t>(sum);
    }
    uint32_t k0 = key[0], k1 = key[1];
    for (int64 round = 0; round < rounds; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(multipliers[0]) * c[0];
      const uint64_t p1 = static_cast<uint64_t>(multipliers[1]) * c[2];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, n1 = static_cast<uint32_t>(p1);
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, n3 = static_cast<uint32_t>(p0);
      c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
      k0 += increments[0], k1 += increments[1];
    }
    for (int w = 0; w < 4 && 4 * i + w < n_words; ++w) out[4 * i + w] = c[w];
  }
}

}  // namespace
}  // namespace bilm

extern "C" {

// Every step of an LSTM's recurrence over a batch of rows sorted longest first, time-major: lowbit_kernels.h's
// `Recurrence`, each packed entry's output at `index[k] = t * batch + b` for the rows b < active[t] of step t,
// and its gates at `gate_index[k]`, `bias` (4 * units, null for none) added to them: `gates` (gate_rows,
// 4 * units), `outputs` (steps * batch, output_dim), the rows no entry names zeros. `projection` null for none; a
// clip negative for none. `c` and `h` hold the sorted rows' states, the initial ones on entry and the final ones
// on return. The kernels are float32 (`bilm_lstm_recurrence`) or bfloat16, as their bits
// (`bilm_lstm_recurrence_bfloat16`: its products as TensorFlow's op takes a bfloat16 kernel's). Returns 0, or 1 where there was no memory. These, the two
// products, the char convolutions and Philox are the names the library exports (it is built with -fvisibility=hidden).
#define BILM_EXPORT __attribute__((visibility("default")))

BILM_EXPORT int bilm_lstm_recurrence(const float* gates, const int32_t* gate_index, const float* bias,
                                     const int32_t* index, const int32_t* active, int64_t steps, int64_t batch,
                                     int64_t units, int64_t output_dim, const float* recurrent,
                                     const float* projection, float cell_clip, float proj_clip, float* outputs,
                                     float* c, float* h) {
  return bilm::LstmRecurrence(bilm::OpenMpPool{}, gates, gate_index, bias, index, active, steps, batch, units,
                              output_dim, recurrent, projection, cell_clip, proj_clip, outputs, c, h);
}

BILM_EXPORT int bilm_lstm_recurrence_bfloat16(const float* gates, const int32_t* gate_index,
                                              const float* bias, const int32_t* index, const int32_t* active,
                                              int64_t steps, int64_t batch, int64_t units, int64_t output_dim,
                                              const uint16_t* recurrent, const uint16_t* projection, float cell_clip,
                                              float proj_clip, float* outputs, float* c, float* h) {
  return bilm::LstmRecurrence(bilm::OpenMpPool{}, gates, gate_index, bias, index, active, steps, batch, units,
                              output_dim, recurrent, projection, cell_clip, proj_clip, outputs, c, h);
}

// out (rows, m) = x (rows, n) @ kernel (n, m), x float32, row-major: lowbit_kernels.h's `Product`, each row's
// sums the same bytes at any number of rows; the kernel float32 (`bilm_matmul`) or bfloat16, as its bits
// (`bilm_matmul_bfloat16`). Returns 0, or 1 where there was no memory.
BILM_EXPORT int bilm_matmul(const float* x, int64_t rows, int64_t n, const float* kernel, int64_t m, float* out) {
  return bilm::lowbit::Product<float>(bilm::OpenMpPool{}, bilm::ReusedScratch{}, x, rows, n, kernel, m, nullptr, out)
             ? 0
             : 1;
}

BILM_EXPORT int bilm_matmul_bfloat16(const float* x, int64_t rows, int64_t n, const uint16_t* kernel, int64_t m,
                                     float* out) {
  return bilm::lowbit::Product<uint16_t>(bilm::OpenMpPool{}, bilm::ReusedScratch{}, x, rows, n, kernel, m, nullptr,
                                         out)
             ? 0
             : 1;
}

// out (n, sum of nums) = each of `n` tokens' char convolutions (`ids` int32 (n, columns), every id below
// `table_rows`) max-pooled over its `columns - width + 1` windows, filter f's from its table (table_rows,
// widths[f], nums[f]) (row c, offset k: the char embedding's row c times the kernel's offset k), the tables
// one after another in `tables`: `CharMaxPooled`. Every filter's width is at most `columns`.
BILM_EXPORT void bilm_char_max_pooled(const int32_t* ids, int64_t n, int64_t columns, const float* tables,
                                      const int64_t* widths, const int64_t* nums, int64_t n_filters,
                                      int64_t table_rows, float* out) {
  bilm::CharMaxPooled(ids, n, columns, tables, widths, nums, n_filters, table_rows, out);
}

// out (n_words,): the first `n_words` words of Philox with `rounds` rounds from `key` (2,) and the 128-bit
// `counter` (4,) (low word first), the rounds' `multipliers` (2,) and key `increments` (2,), each word in an
// int64 (as PyTorch holds them): `Philox`.
BILM_EXPORT void bilm_philox(const uint32_t* key, const uint32_t* counter, const uint32_t* multipliers,
                             const uint32_t* increments, int64_t rounds, int64_t n_words, int64_t* out) {
  bilm::Philox(key, counter, multipliers, increments, rounds, n_words, out);
}

}  // extern "C"
