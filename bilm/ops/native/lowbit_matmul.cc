// BilmLowbitMatmul: float32 x times a kernel of few bytes a value, for a few rows.
//
//   x       float32 (rows, n)
//   kernel  bfloat16, int8 or float32 (n, m), row-major as TensorFlow stores it
//   scale   float32 (m,), one factor per output column, or (0,) for none
//   product float32 (rows, m) = (x @ float32(kernel)) * scale
//
// A kernel value is widened to float32 exactly (bfloat16: its 16 bits become
// the high half of a float32; int8: an integer) and multiplied with x as it
// is, without rounding x; the sums accumulate in float32.
//
// With a few rows, the product is bound by reading the kernel from memory,
// so the work is arranged to read it once, in long contiguous runs: the
// columns are cut into chunks (and a narrow kernel's rows into blocks), each
// one task of TensorFlow's CPU worker threads, and a chunk's float32
// accumulators (up to kMaxRows rows of them) stay in L1 while the kernel
// rows stream past:
//   acc[r, chunk] += x[r, i] * kernel[i, chunk]   for i = 0 .. n - 1.
// More rows than kMaxRows are taken kMaxRows at a time, each group reading
// the chunk's kernel slab again (from cache, if it fits): correct, but a
// stock float32 matmul is faster there.
//
// float32 kernels are registered only where the build has AVX2 and FMA:
// without vector code the loop is no match for TensorFlow's own float32
// matmul, which then stays the only one (a float32 call finds no kernel).

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define BILM_LOWBIT_AVX2 1
#endif

namespace bilm {
namespace {

using tensorflow::int64;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::TensorShapeUtils;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// Rows of x that share one pass over the kernel.
constexpr int kMaxRows = 8;
// Floats of accumulators per task (kMaxRows * chunk width at most): 16 KB, half of L1.
constexpr int64 kAccumulatorFloats = 4096;
// Splitting a narrow kernel's rows over threads: at least this many rows
// each, and at most this many floats of partial sums in all.
constexpr int64 kMinSplitRows = 64;
constexpr int64 kMaxPartialFloats = 1 << 20;

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

// acc[r * lda + j] += sum_i x[r * ldx + i] * widen(k[i * ldk + j]) for
// r < R, j < width, i < n. Four kernel rows are read per pass over the
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
        // Two partial sums, so the four products are not one chain of dependent FMAs.
        __m256 s0 = _mm256_fmadd_ps(xs[r][0], w0, _mm256_loadu_ps(a));
        __m256 s1 = _mm256_mul_ps(xs[r][1], w1);
        s0 = _mm256_fmadd_ps(xs[r][2], w2, s0);
        s1 = _mm256_fmadd_ps(xs[r][3], w3, s1);
        _mm256_storeu_ps(a, _mm256_add_ps(s0, s1));
      }
    }
#endif
    for (; j < width; ++j) {
      const float w0 = Widen(k0[j]), w1 = Widen(k1[j]), w2 = Widen(k2[j]), w3 = Widen(k3[j]);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * ldx + i;
        acc[r * lda + j] += xr[0] * w0 + xr[1] * w1 + xr[2] * w2 + xr[3] * w3;
      }
    }
  }
  for (; i < n; ++i) {
    const W* ki = k + i * ldk;
    int64 j = 0;
#ifdef BILM_LOWBIT_AVX2
    __m256 xs[R];
    for (int r = 0; r < R; ++r) xs[r] = _mm256_set1_ps(x[r * ldx + i]);
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
      for (int r = 0; r < R; ++r) acc[r * lda + j] += x[r * ldx + i] * w;
    }
  }
}

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

// out[r, j] = (x[r, :depth] @ widen(k[:depth, j])) * scale[j] for r < rows, j < width, where
// each pointer is at the chunk's first element and scale may be null (no scaling).
template <typename W>
void MultiplyChunk(const float* x, int64 ldx, int64 rows, const W* k, int64 ldk, int64 depth,
                   const float* scale, int64 width, float* out, int64 ldo) {
  alignas(64) float acc[kAccumulatorFloats];
  for (int64 r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int group = static_cast<int>(std::min<int64>(kMaxRows, rows - r0));
    std::fill(acc, acc + group * width, 0.0f);
    AccumulateRows<W>(group, x + r0 * ldx, ldx, k, ldk, depth, width, acc, width);
    for (int r = 0; r < group; ++r) {
      float* o = out + (r0 + r) * ldo;
      const float* a = acc + r * width;
      if (scale == nullptr) {
        std::copy(a, a + width, o);
      } else {
        for (int64 j = 0; j < width; ++j) o[j] = a[j] * scale[j];
      }
    }
  }
}

template <typename T, typename W>
class LowbitMatmulOp : public OpKernel {
 public:
  explicit LowbitMatmulOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& kernel = context->input(1);
    const Tensor& scale = context->input(2);
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(x.shape()),
                tensorflow::errors::InvalidArgument("x must be a matrix (rows, n); received shape ",
                                                    x.shape().DebugString()));
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(kernel.shape()),
                tensorflow::errors::InvalidArgument("kernel must be a matrix (n, m); received shape ",
                                                    kernel.shape().DebugString()));
    const int64 rows = x.dim_size(0), n = x.dim_size(1), m = kernel.dim_size(1);
    OP_REQUIRES(context, kernel.dim_size(0) == n,
                tensorflow::errors::InvalidArgument("x's columns must match kernel's rows; received x ",
                                                    x.shape().DebugString(), " and kernel ",
                                                    kernel.shape().DebugString()));
    OP_REQUIRES(context,
                TensorShapeUtils::IsVector(scale.shape()) &&
                    (scale.dim_size(0) == 0 || scale.dim_size(0) == m),
                tensorflow::errors::InvalidArgument("scale must have shape (", m, ",) or (0,); received ",
                                                    scale.shape().DebugString()));
    Tensor* product = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({rows, m}), &product));
    if (rows == 0 || m == 0) return;

    const float* xs = x.flat<float>().data();
    const W* ks = reinterpret_cast<const W*>(kernel.flat<T>().data());
    const float* scales = scale.dim_size(0) == 0 ? nullptr : scale.flat<float>().data();
    float* out = product->flat<float>().data();

    auto* workers = context->device()->tensorflow_cpu_worker_threads()->workers;
    const int64 threads = std::max(1, workers->NumThreads());
    const int64 group = std::min<int64>(kMaxRows, rows);
    // Chunks of columns as wide as the accumulators allow: long contiguous
    // runs of each kernel row. When there are fewer chunks than threads (a
    // narrow kernel), the kernel's rows are split too, each task reading a
    // contiguous block of them into its own partial sums, added up after.
    const int64 chunk = std::max<int64>(8, (kAccumulatorFloats / group) / 8 * 8);
    const int64 chunks = (m + chunk - 1) / chunk;
    int64 splits = 1;
    if (chunks < threads && rows * m * threads <= kMaxPartialFloats) {
      splits = std::min((threads + chunks - 1) / chunks, std::max<int64>(1, n / kMinSplitRows));
    }
    // Row blocks of the kernel, multiples of 4 (AccumulateChunk's step) but the last.
    const int64 split_rows = ((n + splits - 1) / splits + 3) / 4 * 4;
    Tensor partial;
    float* partials = out;
    if (splits > 1) {
      OP_REQUIRES_OK(context, context->allocate_temp(tensorflow::DT_FLOAT, TensorShape({splits, rows, m}),
                                                     &partial));
      partials = partial.flat<float>().data();
    }
    workers->ParallelFor(chunks * splits, tsl::thread::ThreadPool::SchedulingParams::Fixed(1),
                         [=](int64_t begin, int64_t end) {
                           for (int64 task = begin; task < end; ++task) {
                             const int64 j0 = (task % chunks) * chunk, s = task / chunks;
                             const int64 i0 = std::min(n, s * split_rows);
                             const int64 depth = std::min(n, i0 + split_rows) - i0;
                             MultiplyChunk<W>(xs + i0, n, rows, ks + i0 * m + j0, m, depth,
                                              splits > 1 || scales == nullptr ? nullptr : scales + j0,
                                              std::min(chunk, m - j0), partials + s * rows * m + j0, m);
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
};

tensorflow::Status ShapeFn(InferenceContext* c) {
  ShapeHandle x, kernel, scale;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &kernel));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &scale));
  DimensionHandle n;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(kernel, 0), &n));
  c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(kernel, 1)));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("BilmLowbitMatmul")
    .Input("x: float")
    .Input("kernel: T")
    .Input("scale: float")
    .Output("product: float")
    .Attr("T: {bfloat16, int8, float}")
    .SetShapeFn(ShapeFn);

REGISTER_KERNEL_BUILDER(
    Name("BilmLowbitMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<tensorflow::bfloat16>("T"),
    LowbitMatmulOp<tensorflow::bfloat16, uint16_t>);
REGISTER_KERNEL_BUILDER(
    Name("BilmLowbitMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<tensorflow::int8>("T"),
    LowbitMatmulOp<tensorflow::int8, int8_t>);
#ifdef BILM_LOWBIT_AVX2
REGISTER_KERNEL_BUILDER(
    Name("BilmLowbitMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
    LowbitMatmulOp<float, float>);
#endif

}  // namespace bilm
