// The arithmetic of bilm's CPU products of few rows, whose time is reading
// the kernel from memory, and of an LSTM's recurrence on them, written
// once and free of any framework: TensorFlow's ops (lowbit_matmul.cc) and
// the portable library (portable_kernels.cc) both run it.
//
// The product, `Multiply`: float32 x times a kernel of few bytes a value, for a few rows.
//
//   x       float32 (rows, n)
//   kernel  bfloat16, int8 or float32 (n, m), row-major as TensorFlow stores it
//   scale   float32 (m,), one factor per output column, or none
//   product float32 (rows, m) = (x @ float32(kernel)) * scale
//
// A kernel value is widened to float32 exactly (bfloat16: its 16 bits become
// the high half of a float32; int8: an integer) and multiplied with x as it
// is, without rounding x; the sums accumulate in float32. Where the build has
// AVX512-BF16, a bfloat16 kernel's columns in whole tiles of 32 run as
// bfloat16 dot products instead (`MultiplyPairTile`): x rounded to bfloat16,
// as TensorFlow's bfloat16 matmul rounds it, each product exact and two of
// them added to a float32 sum per instruction, twice the terms of a float32
// fused multiply-add; the columns past the last tile as above.
//
// With a few rows, the product is bound by reading the kernel from memory,
// so the work is arranged to read it once, in long contiguous runs: the
// columns are cut into chunks (and a narrow kernel's rows into blocks), each
// one task of the worker threads, and a chunk's float32 accumulators (up to
// kMaxRows rows of them) stay in L1 while the kernel rows stream past:
//   acc[r, chunk] += x[r, i] * kernel[i, chunk]   for i = 0 .. n - 1.
// More rows than kMaxRows are taken kMaxRows at a time, each group reading
// the chunk's kernel slab again (from cache, if it fits): correct, but a
// stock float32 matmul is faster there.
//
// A framework lends its worker threads as a `Pool`:
//   pool.Threads()         how many there are
//   pool.Blocks(n, c, f)   f(begin, end) over [0, n) in blocks, each unit
//                          costing about c cycles
//   pool.Tasks(n, f)       f(i, i + 1) for each i < n, each its own task
// A row's sums never depend on how the pool cuts the work.

#ifndef BILM_OPS_NATIVE_LOWBIT_KERNELS_H_
#define BILM_OPS_NATIVE_LOWBIT_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define BILM_LOWBIT_AVX2 1
// 16 columns a step where the CPU has AVX512: the widening of 8- and 16-bit
// weights, not the memory, bounds a step of few rows, and a 512-bit step
// widens twice the weights for the same instructions.
#ifdef __AVX512F__
#define BILM_LOWBIT_AVX512 1
// bfloat16 kernels' products as bfloat16 dot products (VDPBF16PS: two products of bfloat16 pairs added to
// a float32 lane per instruction) where the CPU has AVX512-BF16; x is then rounded to bfloat16.
#ifdef __AVX512BF16__
#define BILM_LOWBIT_DPBF16 1
#endif
#endif
#endif

namespace bilm {
namespace lowbit {

using int64 = std::int64_t;

// Rows of x that share one pass over the kernel.
constexpr int kMaxRows = 8;
// Floats of accumulators per task (kMaxRows * chunk width at most): 16 KB, half of L1.
constexpr int64 kAccumulatorFloats = 4096;
// Splitting a narrow kernel's rows over threads: at least this many rows each.
constexpr int64 kMinSplitRows = 64;
// Rows of one product from which its float32 kernel is copied into tiles first (`PackTiles`): the copy
// is one more pass over the kernel, which a few groups of rows do not repay (at 8 and 22 rows the copy
// made every published kernel's product slower); at 64 rows a deep kernel (2048 x 4096) gained by it.
constexpr int64 kMinPackedRows = 4 * kMaxRows;

inline float Widen(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline float Widen(int8_t value) { return static_cast<float>(value); }

inline float Widen(float value) { return value; }

#ifdef BILM_LOWBIT_AVX2
inline __m256 Widen8(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

inline __m256 Widen8(const int8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

inline __m256 Widen8(const float* p) { return _mm256_loadu_ps(p); }
#endif

#ifdef BILM_LOWBIT_AVX512
inline __m512 Widen16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

inline __m512 Widen16(const int8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}

inline __m512 Widen16(const float* p) { return _mm512_loadu_ps(p); }
#endif

// acc[r * lda + j] += sum_i x[r * ldx + i] * widen(k[i * ldk + j]) for
// r < R, j < width, i < n, one fused multiply-add per term in the order of
// i: every path below (vector widths, the scalar columns, `MultiplyTile`)
// adds a row's terms in that one order, so a row's sums do not depend on
// how many rows share the call. Four kernel rows are read per pass over the
// accumulators, so each accumulator is loaded and stored once per four.
template <typename W, int R>
void AccumulateChunk(const float* x, int64 ldx, const W* k, int64 ldk, int64 n, int64 width,
                     float* acc, int64 lda) {
  int64 i = 0;
  for (; i + 4 <= n; i += 4) {
    const W* k0 = k + i * ldk;
    const W* k1 = k0 + ldk;
    const W* k2 = k1 + ldk;
    const W* k3 = k2 + ldk;
    int64 j = 0;
#ifdef BILM_LOWBIT_AVX2
    __m256 xs[R][4];
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q) xs[r][q] = _mm256_set1_ps(x[r * ldx + i + q]);
    }
    // Hardware prefetchers lose track of four interleaved runs that end every row
    // (narrow kernels): ask for the rows two passes ahead.
    const int64 ahead = i + 8 + 4 <= n ? 8 * ldk : 0;
#ifdef BILM_LOWBIT_AVX512
    for (; j + 16 <= width; j += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(k0 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k1 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k2 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k3 + ahead + j), _MM_HINT_T0);
      const __m512 w0 = Widen16(k0 + j);
      const __m512 w1 = Widen16(k1 + j);
      const __m512 w2 = Widen16(k2 + j);
      const __m512 w3 = Widen16(k3 + j);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        const float* xr = x + r * ldx + i;
        __m512 s = _mm512_fmadd_ps(_mm512_set1_ps(xr[0]), w0, _mm512_loadu_ps(a));
        s = _mm512_fmadd_ps(_mm512_set1_ps(xr[1]), w1, s);
        s = _mm512_fmadd_ps(_mm512_set1_ps(xr[2]), w2, s);
        s = _mm512_fmadd_ps(_mm512_set1_ps(xr[3]), w3, s);
        _mm512_storeu_ps(a, s);
      }
    }
#endif
    for (; j + 8 <= width; j += 8) {
      _mm_prefetch(reinterpret_cast<const char*>(k0 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k1 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k2 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k3 + ahead + j), _MM_HINT_T0);
      const __m256 w0 = Widen8(k0 + j);
      const __m256 w1 = Widen8(k1 + j);
      const __m256 w2 = Widen8(k2 + j);
      const __m256 w3 = Widen8(k3 + j);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        __m256 s = _mm256_fmadd_ps(xs[r][0], w0, _mm256_loadu_ps(a));
        s = _mm256_fmadd_ps(xs[r][1], w1, s);
        s = _mm256_fmadd_ps(xs[r][2], w2, s);
        s = _mm256_fmadd_ps(xs[r][3], w3, s);
        _mm256_storeu_ps(a, s);
      }
    }
#endif
    for (; j < width; ++j) {
      const float w0 = Widen(k0[j]), w1 = Widen(k1[j]), w2 = Widen(k2[j]), w3 = Widen(k3[j]);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * ldx + i;
        float a = acc[r * lda + j];
        a = std::fma(xr[0], w0, a);
        a = std::fma(xr[1], w1, a);
        a = std::fma(xr[2], w2, a);
        acc[r * lda + j] = std::fma(xr[3], w3, a);
      }
    }
  }
  for (; i < n; ++i) {
    const W* ki = k + i * ldk;
    int64 j = 0;
#ifdef BILM_LOWBIT_AVX2
    __m256 xs[R];
    for (int r = 0; r < R; ++r) xs[r] = _mm256_set1_ps(x[r * ldx + i]);
#ifdef BILM_LOWBIT_AVX512
    for (; j + 16 <= width; j += 16) {
      const __m512 w = Widen16(ki + j);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + i]), w, _mm512_loadu_ps(a)));
      }
    }
#endif
    for (; j + 8 <= width; j += 8) {
      const __m256 w = Widen8(ki + j);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        _mm256_storeu_ps(a, _mm256_fmadd_ps(xs[r], w, _mm256_loadu_ps(a)));
      }
    }
#endif
    for (; j < width; ++j) {
      const float w = Widen(ki[j]);
      for (int r = 0; r < R; ++r) acc[r * lda + j] = std::fma(x[r * ldx + i], w, acc[r * lda + j]);
    }
  }
}

// Columns a `MultiplyTile` takes: two 512-bit vectors.
constexpr int64 kTileWidth = 32;

#ifdef BILM_LOWBIT_AVX512
constexpr int64 kTileColumns = kTileWidth;

// acc[r * lda + j] = sum_i x[r * ldx + i] * widen(k[i * ldk + j]) for r <
// R, j < kTileColumns, i < n: AccumulateChunk's sums (from zero, one fused
// multiply-add per term in the order of i), with the accumulators in
// registers for the whole depth instead of in memory, so that a batch's
// LSTM steps are bound by the FMA units rather than by loads and stores.
template <typename W, int R>
void MultiplyTile(const float* x, int64 ldx, const W* k, int64 ldk, int64 n, float* acc, int64 lda) {
  __m512 a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int64 i = 0; i < n; ++i) {
    const W* ki = k + i * ldk;
    const __m512 w0 = Widen16(ki);
    const __m512 w1 = Widen16(ki + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * ldx + i]);
      a[r][0] = _mm512_fmadd_ps(xr, w0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(xr, w1, a[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(acc + r * lda, a[r][0]);
    _mm512_storeu_ps(acc + r * lda + 16, a[r][1]);
  }
}

template <typename W>
void MultiplyTileRows(int rows, const float* x, int64 ldx, const W* k, int64 ldk, int64 n, float* acc,
                      int64 lda) {
  switch (rows) {
    case 1: return MultiplyTile<W, 1>(x, ldx, k, ldk, n, acc, lda);
    case 2: return MultiplyTile<W, 2>(x, ldx, k, ldk, n, acc, lda);
    case 3: return MultiplyTile<W, 3>(x, ldx, k, ldk, n, acc, lda);
    case 4: return MultiplyTile<W, 4>(x, ldx, k, ldk, n, acc, lda);
    case 5: return MultiplyTile<W, 5>(x, ldx, k, ldk, n, acc, lda);
    case 6: return MultiplyTile<W, 6>(x, ldx, k, ldk, n, acc, lda);
    case 7: return MultiplyTile<W, 7>(x, ldx, k, ldk, n, acc, lda);
    default: return MultiplyTile<W, kMaxRows>(x, ldx, k, ldk, n, acc, lda);
  }
}
#endif

#ifdef BILM_LOWBIT_DPBF16
// x's values rounded to bfloat16 (to nearest, ties to even; a NaN stays one), two a word:
// pairs[r * ldp + p] holds x[r, 2p] in its low half and x[r, 2p + 1] (0 past n) in its high half.
inline uint16_t RoundToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

inline void PairRows(const float* x, int64 rows, int64 n, uint32_t* pairs, int64 ldp) {
  for (int64 r = 0; r < rows; ++r) {
    for (int64 p = 0; p < ldp; ++p) {
      const uint32_t low = RoundToBfloat16(x[r * n + 2 * p]);
      const uint32_t high = 2 * p + 1 < n ? RoundToBfloat16(x[r * n + 2 * p + 1]) : 0;
      pairs[r * ldp + p] = low | (high << 16);
    }
  }
}

// acc[r * lda + j] = sum over pairs p of x[r, 2p] * k[2p, j] + x[r, 2p + 1] * k[2p + 1, j] (a zero row
// past n), for r < R, j < kTileWidth: from zero, one VDPBF16PS per pair in the order of p, each
// product of bfloat16 values exact in float32, the accumulators in registers. `tile` is a kernel's
// tile in `PackPairTiles`' layout (pair p's 32 columns as 64 values, each column's two rows side by
// side), read as one contiguous run.
template <int R>
void MultiplyPairTile(const uint32_t* pairs, int64 ldp, const uint16_t* tile, int64 n, float* acc, int64 lda) {
  __m512 a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int64 p = 0; 2 * p < n; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(tile + p * 2 * kTileWidth);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(tile + p * 2 * kTileWidth + kTileWidth);
    for (int r = 0; r < R; ++r) {
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[r * ldp + p]));
      a[r][0] = _mm512_dpbf16_ps(a[r][0], xr, w0);
      a[r][1] = _mm512_dpbf16_ps(a[r][1], xr, w1);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(acc + r * lda, a[r][0]);
    _mm512_storeu_ps(acc + r * lda + 16, a[r][1]);
  }
}

// The same sums for columns j < width (a multiple of kTileWidth) of a kernel as TensorFlow stores it,
// the accumulators in memory (zeros on entry): kernel rows stream past in pairs, each pair's columns
// interleaved in registers (`unpacklo/hi_epi16`), so that each group of 32 accumulators holds its
// columns in the order `Unscramble` undoes. One VDPBF16PS per pair in the order of p from zero, as
// `MultiplyPairTile`: the same bytes.
template <int R>
void AccumulatePairs(const uint32_t* pairs, int64 ldp, const uint16_t* k, int64 ldk, int64 n, int64 width,
                     float* acc, int64 lda) {
  int64 p = 0;
  // Two pairs (four kernel rows) a pass over the accumulators, so each is loaded and stored once per four rows;
  // the rows two passes ahead prefetched, as `AccumulateChunk` does.
  for (; 2 * p + 4 <= n; p += 2) {
    const uint16_t* k0 = k + 2 * p * ldk;
    const uint16_t* k1 = k0 + ldk;
    const uint16_t* k2 = k1 + ldk;
    const uint16_t* k3 = k2 + ldk;
    const int64 ahead = 2 * p + 8 + 4 <= n ? 8 * ldk : 0;
    __m512bh xs[R][2];
    for (int r = 0; r < R; ++r) {
      xs[r][0] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[r * ldp + p]));
      xs[r][1] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[r * ldp + p + 1]));
    }
    for (int64 j = 0; j < width; j += kTileWidth) {
      _mm_prefetch(reinterpret_cast<const char*>(k0 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k1 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k2 + ahead + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k3 + ahead + j), _MM_HINT_T0);
      const __m512i e0 = _mm512_loadu_si512(k0 + j), o0 = _mm512_loadu_si512(k1 + j);
      const __m512i e1 = _mm512_loadu_si512(k2 + j), o1 = _mm512_loadu_si512(k3 + j);
      const __m512bh low0 = (__m512bh)_mm512_unpacklo_epi16(e0, o0), high0 = (__m512bh)_mm512_unpackhi_epi16(e0, o0);
      const __m512bh low1 = (__m512bh)_mm512_unpacklo_epi16(e1, o1), high1 = (__m512bh)_mm512_unpackhi_epi16(e1, o1);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        _mm512_storeu_ps(a, _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_loadu_ps(a), xs[r][0], low0), xs[r][1], low1));
        _mm512_storeu_ps(a + 16,
                         _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_loadu_ps(a + 16), xs[r][0], high0), xs[r][1], high1));
      }
    }
  }
  for (; 2 * p < n; ++p) {
    const uint16_t* even = k + 2 * p * ldk;
    const uint16_t* odd = 2 * p + 1 < n ? even + ldk : nullptr;
    __m512bh xs[R];
    for (int r = 0; r < R; ++r) xs[r] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[r * ldp + p]));
    for (int64 j = 0; j < width; j += kTileWidth) {
      const __m512i e = _mm512_loadu_si512(even + j);
      const __m512i o = odd == nullptr ? _mm512_setzero_si512() : _mm512_loadu_si512(odd + j);
      const __m512bh low = (__m512bh)_mm512_unpacklo_epi16(e, o);
      const __m512bh high = (__m512bh)_mm512_unpackhi_epi16(e, o);
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * lda + j;
        _mm512_storeu_ps(a, _mm512_dpbf16_ps(_mm512_loadu_ps(a), xs[r], low));
        _mm512_storeu_ps(a + 16, _mm512_dpbf16_ps(_mm512_loadu_ps(a + 16), xs[r], high));
      }
    }
  }
}

// Puts `AccumulatePairs`' accumulators of `rows` rows and `width` columns (a multiple of kTileWidth) in
// column order: 128-bit lane q of a group's first 16 holds its columns 8q..8q+3, of its second 16
// columns 8q+4..8q+7.
inline void Unscramble(float* acc, int64 lda, int64 rows, int64 width) {
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64 r = 0; r < rows; ++r) {
    for (int64 j = 0; j < width; j += kTileWidth) {
      float* a = acc + r * lda + j;
      const __m512 low = _mm512_loadu_ps(a), high = _mm512_loadu_ps(a + 16);
      _mm512_storeu_ps(a, _mm512_permutex2var_ps(low, first, high));
      _mm512_storeu_ps(a + 16, _mm512_permutex2var_ps(low, second, high));
    }
  }
}

// `tiles[((j / kTileWidth) * pairs + p) * 2 * kTileWidth + 2 * (j % kTileWidth) + e] = k[2p + e, j]`
// (0 past n) for the pairs p < (n + 1) / 2 and the columns j of whole tiles: `MultiplyPairTile`'s layout.
template <typename Pool>
void PackPairTiles(const Pool& pool, const uint16_t* k, int64 n, int64 m, uint16_t* tiles) {
  const int64 whole = m / kTileWidth, n_pairs = (n + 1) / 2;
  pool.Blocks(n_pairs, 4 * m, [=](int64_t begin, int64_t end) {
    for (int64 p = begin; p < end; ++p) {
      const uint16_t* even = k + 2 * p * m;
      const uint16_t* odd = 2 * p + 1 < n ? even + m : nullptr;
      for (int64 t = 0; t < whole; ++t) {
        uint16_t* out = tiles + (t * n_pairs + p) * 2 * kTileWidth;
        for (int64 c = 0; c < kTileWidth; ++c) {
          out[2 * c] = even[t * kTileWidth + c];
          out[2 * c + 1] = odd == nullptr ? 0 : odd[t * kTileWidth + c];
        }
      }
    }
  });
}

inline void MultiplyPairTileRows(int rows, const uint32_t* pairs, int64 ldp, const uint16_t* tile, int64 n, float* acc,
                          int64 lda) {
  switch (rows) {
    case 1: return MultiplyPairTile<1>(pairs, ldp, tile, n, acc, lda);
    case 2: return MultiplyPairTile<2>(pairs, ldp, tile, n, acc, lda);
    case 3: return MultiplyPairTile<3>(pairs, ldp, tile, n, acc, lda);
    case 4: return MultiplyPairTile<4>(pairs, ldp, tile, n, acc, lda);
    case 5: return MultiplyPairTile<5>(pairs, ldp, tile, n, acc, lda);
    case 6: return MultiplyPairTile<6>(pairs, ldp, tile, n, acc, lda);
    case 7: return MultiplyPairTile<7>(pairs, ldp, tile, n, acc, lda);
    default: return MultiplyPairTile<kMaxRows>(pairs, ldp, tile, n, acc, lda);
  }
}

inline void AccumulatePairRows(int rows, const uint32_t* pairs, int64 ldp, const uint16_t* k, int64 ldk, int64 n,
                        int64 width, float* acc, int64 lda) {
  switch (rows) {
    case 1: return AccumulatePairs<1>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 2: return AccumulatePairs<2>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 3: return AccumulatePairs<3>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 4: return AccumulatePairs<4>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 5: return AccumulatePairs<5>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 6: return AccumulatePairs<6>(pairs, ldp, k, ldk, n, width, acc, lda);
    case 7: return AccumulatePairs<7>(pairs, ldp, k, ldk, n, width, acc, lda);
    default: return AccumulatePairs<kMaxRows>(pairs, ldp, k, ldk, n, width, acc, lda);
  }
}
#endif

// Whether a product with a kernel of W values takes its whole tiles of columns as bfloat16 dot
// products (`MultiplyPairTile`, x rounded to bfloat16): a bfloat16 kernel where the build has
// AVX512-BF16. The choice depends on the kernel's type alone, never on the rows.
template <typename W>
constexpr bool kDotProducts =
#ifdef BILM_LOWBIT_DPBF16
    std::is_same<W, uint16_t>::value;
#else
    false;
#endif

template <typename W>
void AccumulateRows(int rows, const float* x, int64 ldx, const W* k, int64 ldk, int64 n, int64 width,
                    float* acc, int64 lda) {
  switch (rows) {
    case 1: return AccumulateChunk<W, 1>(x, ldx, k, ldk, n, width, acc, lda);
    case 2: return AccumulateChunk<W, 2>(x, ldx, k, ldk, n, width, acc, lda);
    case 3: return AccumulateChunk<W, 3>(x, ldx, k, ldk, n, width, acc, lda);
    case 4: return AccumulateChunk<W, 4>(x, ldx, k, ldk, n, width, acc, lda);
    case 5: return AccumulateChunk<W, 5>(x, ldx, k, ldk, n, width, acc, lda);
    case 6: return AccumulateChunk<W, 6>(x, ldx, k, ldk, n, width, acc, lda);
    case 7: return AccumulateChunk<W, 7>(x, ldx, k, ldk, n, width, acc, lda);
    default: return AccumulateChunk<W, kMaxRows>(x, ldx, k, ldk, n, width, acc, lda);
  }
}

// out[r * ldo + j] = acc[r * lda + j] * scale[j] (scale null: no scaling) for r < rows, j < width.
inline void WriteRows(const float* acc, int64 lda, int64 rows, int64 width, const float* scale, float* out,
                      int64 ldo) {
  for (int64 r = 0; r < rows; ++r) {
    const float* a = acc + r * lda;
    float* o = out + r * ldo;
    if (scale == nullptr) {
      std::copy(a, a + width, o);
    } else {
      for (int64 j = 0; j < width; ++j) o[j] = a[j] * scale[j];
    }
  }
}

// out[r, j] = (x[r, :depth] @ widen(k[:depth, j])) * scale[j] for r < rows, j < width, where
// each pointer is at the chunk's first element and scale may be null (no scaling). With `tiles`
// (a float32 kernel's copy in `PackTiles`' layout, at the chunk's first tile and row; rows of
// `tile_depth` floats a column), groups of kMaxRows rows take the chunk's columns kTileColumns at
// a time (`MultiplyTile`, reading a tile's columns as one contiguous run); the rest (the last
// group's rows, the columns past the tiles, kernels without tiles) accumulate in memory
// (`AccumulateChunk`). Both add a row's terms in one order.
template <typename W>
void MultiplyChunk(const float* x, int64 ldx, int64 rows, const W* k, int64 ldk, int64 depth,
                   const float* scale, int64 width, float* out, int64 ldo, const float* tiles, int64 tile_depth,
                   const uint32_t* pairs, int64 ldp, const uint16_t* pair_tiles) {
  alignas(64) float acc[kAccumulatorFloats];
  int64 full = 0, tiled = 0;
#ifdef BILM_LOWBIT_DPBF16
  if constexpr (kDotProducts<W>) {
    full = rows;
    tiled = width / kTileWidth * kTileWidth;
    for (int64 j = 0; pair_tiles != nullptr && j < tiled; j += kTileWidth) {
      for (int64 r0 = 0; r0 < rows; r0 += kMaxRows) {
        const int group = static_cast<int>(std::min<int64>(kMaxRows, rows - r0));
        const uint16_t* tile = pair_tiles + (j / kTileWidth) * ((tile_depth + 1) / 2) * 2 * kTileWidth;
        MultiplyPairTileRows(group, pairs + r0 * ldp, ldp, tile, depth, acc, kTileWidth);
        WriteRows(acc, kTileWidth, group, kTileWidth, scale == nullptr ? nullptr : scale + j, out + r0 * ldo + j,
                  ldo);
      }
    }
    for (int64 r0 = 0; pair_tiles == nullptr && tiled > 0 && r0 < rows; r0 += kMaxRows) {
      const int group = static_cast<int>(std::min<int64>(kMaxRows, rows - r0));
      std::fill(acc, acc + group * tiled, 0.0f);
      AccumulatePairRows(group, pairs + r0 * ldp, ldp, k, ldk, depth, tiled, acc, tiled);
      Unscramble(acc, tiled, group, tiled);
      WriteRows(acc, tiled, group, tiled, scale, out + r0 * ldo, ldo);
    }
  }
#endif
#ifdef BILM_LOWBIT_AVX512
  if (tiles != nullptr) {
    full = rows;
    tiled = width / kTileColumns * kTileColumns;
  }
  for (int64 j = 0; tiles != nullptr && j < tiled; j += kTileColumns) {
    for (int64 r0 = 0; r0 < full; r0 += kMaxRows) {
      const int group = static_cast<int>(std::min<int64>(kMaxRows, rows - r0));
      MultiplyTileRows<float>(group, x + r0 * ldx, ldx, tiles + (j / kTileColumns) * tile_depth * kTileColumns,
                              kTileColumns, depth, acc, kTileColumns);
      WriteRows(acc, kTileColumns, group, kTileColumns, scale == nullptr ? nullptr : scale + j,
                out + r0 * ldo + j, ldo);
    }
  }
#endif
  for (int64 r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int group = static_cast<int>(std::min<int64>(kMaxRows, rows - r0));
    const int64 from = r0 < full ? tiled : 0;
    const int64 rest = width - from;
    if (rest == 0) continue;
    std::fill(acc, acc + group * rest, 0.0f);
    AccumulateRows<W>(group, x + r0 * ldx, ldx, k + from, ldk, depth, rest, acc, rest);
    WriteRows(acc, rest, group, rest, scale == nullptr ? nullptr : scale + from, out + r0 * ldo + from, ldo);
  }
}

// `tiles[(j / kTileWidth) * n * kTileWidth + i * kTileWidth + j % kTileWidth] = k[i * m + j]` for i < n
// and the columns j of whole tiles: each tile's columns for all rows as one contiguous run, which
// `MultiplyTile` reads at the prefetchers' pace instead of one cache line a kernel row.
template <typename Pool>
void PackTiles(const Pool& pool, const float* k, int64 n, int64 m, float* tiles) {
  const int64 whole = m / kTileWidth;
  pool.Blocks(n, 2 * m, [=](int64_t begin, int64_t end) {
    for (int64 i = begin; i < end; ++i) {
      for (int64 t = 0; t < whole; ++t) {
        std::copy_n(k + i * m + t * kTileWidth, kTileWidth,
                    tiles + (t * n + i) * kTileWidth);
      }
    }
  });
}

// How `Multiply` cuts a product of `rows` x `(n, m)` into tasks.
struct Plan {
  int64 chunk;       // columns a task takes
  int64 chunks;
  int64 splits;      // blocks of kernel rows (a narrow kernel's), each summed apart
  int64 split_rows;  // kernel rows a block takes

  Plan(int64 rows, int64 n, int64 m, int64 threads) {
    // Chunks of columns as wide as the accumulators of the rows allow (a
    // multiple of kTileWidth, so that chunks start at a tile): long
    // contiguous runs of each kernel row. A chunk's width does not change
    // a row's sums; the kernel rows' split does, so it depends on nothing
    // but the kernel and the threads: each row's product is the same
    // bytes whatever the number of rows beside it (an LSTM step's rows are
    // a batch's sentences). When a kernel is narrow (fewer chunks of
    // kMaxRows rows than threads), its rows are split too, each task
    // reading a contiguous block of them into its own partial sums, added
    // up after in block order.
    const int64 group = std::min<int64>(kMaxRows, std::max<int64>(rows, 1));
    chunk = std::max<int64>(kTileWidth, (kAccumulatorFloats / group) / kTileWidth * kTileWidth);
    chunks = (m + chunk - 1) / chunk;
    const int64 narrowest_chunks = (m + kAccumulatorFloats / kMaxRows - 1) / (kAccumulatorFloats / kMaxRows);
    splits = 1;
    if (narrowest_chunks < threads) {
      splits = std::min((threads + narrowest_chunks - 1) / narrowest_chunks, std::max<int64>(1, n / kMinSplitRows));
    }
    // Row blocks of the kernel, multiples of 4 (AccumulateChunk's step) but the last.
    split_rows = ((n + splits - 1) / splits + 3) / 4 * 4;
  }

  // Floats of partial sums `Multiply` needs (0 without splits).
  int64 PartialFloats(int64 rows, int64 m) const { return splits > 1 ? splits * rows * m : 0; }
};

// out (rows, m) = (x (rows, n) @ widen(k (n, m))) * scale (null: none), on
// the worker threads; `partials` holds `plan.PartialFloats(rows, m)` floats.
template <typename W, typename Pool>
void Multiply(const Pool& pool, const Plan& plan, const float* xs, int64 rows, int64 n,
              const W* ks, int64 m, const float* scales, float* out, float* partials,
              const float* tiles = nullptr, const uint16_t* pair_tiles = nullptr) {
  if (rows == 0 || m == 0) return;
  float* sums = plan.splits > 1 ? partials : out;
  const int64 chunk = plan.chunk, chunks = plan.chunks, splits = plan.splits, split_rows = plan.split_rows;
  // x's rows as bfloat16 pairs, for the dot products (`kDotProducts`); a block of kernel rows starts
  // at an even row (`split_rows` is a multiple of 4), so at pair i0 / 2.
  const int64 ldp = (n + 1) / 2;
  std::vector<uint32_t> pair_buffer;
#ifdef BILM_LOWBIT_DPBF16
  if constexpr (kDotProducts<W>) {
    pair_buffer.resize(rows * ldp);
    PairRows(xs, rows, n, pair_buffer.data(), ldp);
  }
#endif
  const uint32_t* pairs = pair_buffer.data();
  pool.Tasks(chunks * splits, [=](int64_t begin, int64_t end) {
    for (int64 task = begin; task < end; ++task) {
      const int64 j0 = (task % chunks) * chunk, s = task / chunks;
      const int64 i0 = std::min(n, s * split_rows);
      const int64 depth = std::min(n, i0 + split_rows) - i0;
      MultiplyChunk<W>(xs + i0, n, rows, ks + i0 * m + j0, m, depth,
                       splits > 1 || scales == nullptr ? nullptr : scales + j0,
                       std::min(chunk, m - j0), sums + s * rows * m + j0, m,
                       tiles == nullptr ? nullptr : tiles + j0 * n + i0 * kTileWidth, n,
                       pairs == nullptr ? nullptr : pairs + i0 / 2, ldp,
                       pair_tiles == nullptr ? nullptr
                                             : pair_tiles + j0 * ldp * 2 + i0 * kTileWidth);
    }
  });
  if (splits > 1) {
    for (int64 e = 0; e < rows * m; ++e) {
      float sum = partials[e];
      for (int64 s = 1; s < splits; ++s) sum += partials[s * rows * m + e];
      out[e] = scales == nullptr ? sum : sum * scales[e % m];
    }
  }
}

#ifdef BILM_LOWBIT_DPBF16
// A bfloat16 kernel `(n, m)` copied into `PackPairTiles`' layout in `scratch`'s floats, or null
// where `scratch` has no memory.
template <typename Pool, typename Scratch>
const uint16_t* PairTiles(const Pool& pool, const Scratch& scratch, const uint16_t* k, int64 n, int64 m) {
  const int64 values = (m / kTileWidth) * ((n + 1) / 2) * 2 * kTileWidth;
  uint16_t* tiles = reinterpret_cast<uint16_t*>(scratch((values + 1) / 2));
  if (tiles != nullptr) PackPairTiles(pool, k, n, m, tiles);
  return tiles;
}
#endif

// out (rows, m) = (x (rows, n) @ widen(k (n, m))) * scale (null: none): `Multiply` with what it needs
// from `scratch(floats)` (see `Recurrence`): a float32 kernel's tiles (`PackTiles`) or a bfloat16
// kernel's pair tiles (`PackPairTiles`) from kMinPackedRows rows on (with fewer rows the copy costs
// more than the tiles save: one sentence's input half, a few sentences' token encodings; the sums are
// the same either way), and the split products' partial sums. False where `scratch` had no memory.
template <typename W, typename Pool, typename Scratch>
bool Product(const Pool& pool, const Scratch& scratch, const float* x, int64 rows, int64 n, const W* k, int64 m,
             const float* scale, float* out) {
  if (rows == 0 || m == 0) return true;
  const Plan plan(rows, n, m, std::max<int64>(1, pool.Threads()));
  const float* tiles = nullptr;
#ifdef BILM_LOWBIT_AVX512
  if (std::is_same<W, float>::value && rows >= kMinPackedRows && m >= kTileWidth) {
    float* buffer = scratch(n * (m / kTileWidth * kTileWidth));
    if (buffer == nullptr) return false;
    PackTiles(pool, reinterpret_cast<const float*>(k), n, m, buffer);
    tiles = buffer;
  }
#endif
  const uint16_t* pair_tiles = nullptr;
#ifdef BILM_LOWBIT_DPBF16
  if constexpr (kDotProducts<W>) {
    if (rows >= kMinPackedRows && m >= kTileWidth) {
      pair_tiles = PairTiles(pool, scratch, k, n, m);
      if (pair_tiles == nullptr) return false;
    }
  }
#endif
  float* partials = nullptr;
  if (plan.PartialFloats(rows, m) > 0) {
    partials = scratch(plan.PartialFloats(rows, m));
    if (partials == nullptr) return false;
  }
  Multiply<W>(pool, plan, x, rows, n, k, m, scale, out, partials, tiles, pair_tiles);
  return true;
}

// Every step of an LSTM's recurrence over a packed batch, its products by `Multiply`: what
// TensorFlow's BilmLstmRecurrence op and the portable library's `bilm_lstm_recurrence` run.
//
//   gates       float32 (gate_rows, 4 * units), x W_x + b, gates i, j, f, o
//   gate_index  packed entry k reads gates[gate_index[k]]; or null: gates[k]
//   active      (steps,): step t computes the first active[t] rows
//               (non-increasing: the rows are sorted longest first)
//   c, h        float32 (batch, units), (batch, output_dim): the initial states on
//               entry, the final states on return
//   recurrent   W (output_dim, 4 * units), recurrent_scale (4 * units,) or null
//   projection  W (units, output_dim), or null for none (output_dim = units)
//   projection_scale (output_dim,) or null
//   cell_clip, proj_clip: negative for none
//   outputs     float32: packed entry k's output at row output_index[k]; or, with
//               output_index null, at row k (step t's rows from sum(active[:t]) on)
//
// `cell(z, g, c, m, units, cell_clip)` is one row's cell step in place: z (4 * units) holds the
// recurrent product h @ W_h on entry, g the row's input half; it updates c (units) and writes the
// cell output m (units), with the forget bias 1. `scratch(floats)` returns that many floats, or
// null after it has reported that it has no memory; `Recurrence` then returns false.
template <typename W, typename Pool, typename Cell, typename Scratch>
bool Recurrence(const Pool& pool, const Cell& cell, const Scratch& scratch, const float* gates,
                const int32_t* gate_index, const int32_t* active, int64 steps, int64 units, int64 output_dim,
                const W* recurrent, const float* recurrent_scale, const W* projection,
                const float* projection_scale, float cell_clip, float proj_clip, float* outputs,
                const int32_t* output_index, float* c, float* h) {
  const int64 most = steps > 0 ? active[0] : 0;
  if (most == 0) return true;
  const bool projected = projection != nullptr;
  const int64 threads = std::max<int64>(1, pool.Threads());
  int64 partial_floats = 0;
  for (int64 t = 0; t < steps; ++t) {
    partial_floats = std::max({partial_floats, Plan(active[t], output_dim, 4 * units, threads)
                                                   .PartialFloats(active[t], 4 * units),
                               Plan(active[t], units, output_dim, threads).PartialFloats(active[t], output_dim)});
  }
  float* z = scratch(most * 4 * units);
  float* m = projected ? scratch(most * units) : h;  // without projection, h is the cell output
  float* partials = partial_floats ? scratch(partial_floats) : nullptr;
  if (z == nullptr || m == nullptr || (partial_floats && partials == nullptr)) return false;
  // Float32 kernels, read at every step by batches of many rows: copied once into tiles
  // (`PackTiles`), read as contiguous runs. The sums are the same either way.
  const float* recurrent_tiles = nullptr;
  const float* projection_tiles = nullptr;
#ifdef BILM_LOWBIT_AVX512
  if (std::is_same<W, float>::value && most >= kMaxRows) {  // one sentence: the copy would cost more than it saves
    const int64 recurrent_floats = output_dim * (4 * units / kTileWidth * kTileWidth);
    const int64 projection_floats = projected ? units * (output_dim / kTileWidth * kTileWidth) : 0;
    float* tiles = scratch(recurrent_floats + projection_floats);
    if (tiles == nullptr) return false;
    PackTiles(pool, reinterpret_cast<const float*>(recurrent), output_dim, 4 * units, tiles);
    recurrent_tiles = tiles;
    if (projected) {
      PackTiles(pool, reinterpret_cast<const float*>(projection), units, output_dim, tiles + recurrent_floats);
      projection_tiles = tiles + recurrent_floats;
    }
  }
#endif
  // bfloat16 kernels taken as dot products, likewise (`PackPairTiles`).
  const uint16_t* recurrent_pair_tiles = nullptr;
  const uint16_t* projection_pair_tiles = nullptr;
#ifdef BILM_LOWBIT_DPBF16
  if constexpr (kDotProducts<W>) {
    if (most >= kMaxRows && 4 * units >= kTileWidth) {
      recurrent_pair_tiles = PairTiles(pool, scratch, recurrent, output_dim, 4 * units);
      if (recurrent_pair_tiles == nullptr) return false;
    }
    if (most >= kMaxRows && projected && output_dim >= kTileWidth) {
      projection_pair_tiles = PairTiles(pool, scratch, projection, units, output_dim);
      if (projection_pair_tiles == nullptr) return false;
    }
  }
#endif
  // Transcendentals of a row's gates, roughly, in cycles.
  const int64 cell_cost = 40 * units;

  int64 offset = 0;
  for (int64 t = 0; t < steps; ++t) {
    const int64 n = active[t];
    if (n == 0) break;
    Multiply<W>(pool, Plan(n, output_dim, 4 * units, threads), h, n, output_dim, recurrent, 4 * units,
                recurrent_scale, z, partials, recurrent_tiles, recurrent_pair_tiles);
    pool.Blocks(n, cell_cost, [&](int64_t begin, int64_t end) {
      for (int64 r = begin; r < end; ++r) {
        const int64 row = gate_index != nullptr ? gate_index[offset + r] : offset + r;
        cell(z + r * 4 * units, gates + row * 4 * units, c + r * units, m + r * units, units, cell_clip);
      }
    });
    if (projected) {
      Multiply<W>(pool, Plan(n, units, output_dim, threads), m, n, units, projection, output_dim,
                  projection_scale, h, partials, projection_tiles, projection_pair_tiles);
      if (proj_clip >= 0) {
        for (int64 e = 0; e < n * output_dim; ++e) h[e] = std::min(std::max(h[e], -proj_clip), proj_clip);
      }
    }
    for (int64 r = 0; r < n; ++r) {
      const int64 row = output_index != nullptr ? output_index[offset + r] : offset + r;
      std::copy_n(h + r * output_dim, output_dim, outputs + row * output_dim);
    }
    offset += n;
  }
  return true;
}

}  // namespace lowbit
}  // namespace bilm

#endif  // BILM_OPS_NATIVE_LOWBIT_KERNELS_H_
