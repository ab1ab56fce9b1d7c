// bilm's CPU ops for products of few rows, whose time is reading the kernel
// from memory: BilmLowbitMatmul, the product, and BilmLstmRecurrence, an
// LSTM's whole recurrence over a packed batch on that product (below). Their
// arithmetic is lowbit_kernels.h's; this file fits it to TensorFlow (its
// tensors, shapes and CPU worker threads).
//
// BilmLowbitMatmul: `Multiply` of lowbit_kernels.h.
//
//   x       float32 (rows, n)
//   kernel  bfloat16, int8 or float32 (n, m), row-major as TensorFlow stores it
//   scale   float32 (m,), one factor per output column, or (0,) for none
//   product float32 (rows, m) = (x @ float32(kernel)) * scale
//
// float32 kernels are registered only where the build has AVX2 and FMA:
// without vector code the loop is no match for TensorFlow's own float32
// matmul, which then stays the only one (a float32 call finds no kernel).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"
#include "Eigen/Core"
#include "lowbit_kernels.h"

namespace bilm {
namespace {

using lowbit::int64;
using lowbit::Product;
using lowbit::Recurrence;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::TensorShapeUtils;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

tsl::thread::ThreadPool* Workers(OpKernelContext* context) {
  return context->device()->tensorflow_cpu_worker_threads()->workers;
}

// lowbit_kernels.h's `Pool` on TensorFlow's CPU worker threads.
struct TfPool {
  tsl::thread::ThreadPool* workers;

  int64 Threads() const { return std::max(1, workers->NumThreads()); }

  template <typename F>
  void Blocks(int64 n, int64 cost, const F& f) const {
    workers->ParallelFor(n, tsl::thread::ThreadPool::SchedulingParams(
                                tsl::thread::ThreadPool::SchedulingStrategy::kAdaptive, cost, std::nullopt),
                         f);
  }

  template <typename F>
  void Tasks(int64 n, const F& f) const {
    workers->ParallelFor(n, tsl::thread::ThreadPool::SchedulingParams::Fixed(1), f);
  }
};

// lowbit_kernels.h's scratch: temporary tensors of the op's context, alive while `tensors` is; null
// after failing the op (no memory).
struct TfScratch {
  OpKernelContext* context;
  std::vector<Tensor>* tensors;

  float* operator()(int64 floats) const {
    tensors->emplace_back();
    const auto status = context->allocate_temp(tensorflow::DT_FLOAT, TensorShape({std::max<int64>(floats, 1)}),
                                               &tensors->back());
    if (!status.ok()) {
      context->SetStatus(status);
      return nullptr;
    }
    return tensors->back().flat<float>().data();
  }
};

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

    const TfPool pool{Workers(context)};
    std::vector<Tensor> temporaries;
    const TfScratch scratch{context, &temporaries};
    // Where a scratch array found no memory, the context holds the allocation's status: the op fails.
    Product<W>(pool, scratch, x.flat<float>().data(), rows, n, reinterpret_cast<const W*>(kernel.flat<T>().data()),
               m, scale.dim_size(0) == 0 ? nullptr : scale.flat<float>().data(), product->flat<float>().data());
  }
};

// One LSTM cell step for a row, in place: z `(4 * units)` holds the
// recurrent product h @ W_h on entry; g is the row's input half x W_x + b.
// Updates the cell c `(units)` and writes the cell output m `(units)`,
// as `bilm.ops.lstm_cell.lstm_cell_step` computes them (forget bias 1).
void CellStep(float* z, const float* g, float* c, float* m, int64 units, float cell_clip) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  Array all(z, 4 * units);
  all = Eigen::Map<const Eigen::ArrayXf>(g, 4 * units) + all;
  Array i(z, units), j(z + units, units), f(z + 2 * units, units), o(z + 3 * units, units);
  Array cell(c, units), out(m, units);
  i = i.logistic();
  j = j.tanh();
  f = (f + 1.0f).logistic();
  cell = f * cell + i * j;
  if (cell_clip >= 0) cell = cell.min(cell_clip).max(-cell_clip);
  out = o.logistic() * cell.tanh();
}

// BilmLstmRecurrence: every step of the LSTM recurrence over a packed
// batch in one op (what `bilm.ops.lstm_recurrence.lstm_recurrence_packed`
// runs in a graph loop), its products by `Multiply`:
//
//   gates       float32 (gate_rows, 4 * units), x W_x + b, gates i, j, f, o
//   gate_index  int32 (n_valid,): packed entry k reads gates[gate_index[k]];
//               or (0,): gates[k]
//   active      int32 (steps,): step t computes the first active[t] rows
//               (non-increasing: the rows are sorted longest first)
//   c0, h0      float32 (batch, units), (batch, output_dim)
//   recurrent   T (output_dim, 4 * units), recurrent_scale (4 * units,) or (0,)
//   projection  T (units, output_dim), or (0, 0) for none (output_dim = units)
//   projection_scale (output_dim,) or (0,)
//   cell_clip, proj_clip: attributes, negative for none
//
//   outputs     float32 (n_valid, output_dim): step t's rows at
//               sum(active[:t]) onwards; c, h the final states.
template <typename T, typename W>
class LstmRecurrenceOp : public OpKernel {
 public:
  explicit LstmRecurrenceOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("cell_clip", &cell_clip_));
    OP_REQUIRES_OK(context, context->GetAttr("proj_clip", &proj_clip_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& gates = context->input(0);
    const Tensor& gate_index = context->input(1);
    const Tensor& active = context->input(2);
    const Tensor& c0 = context->input(3);
    const Tensor& h0 = context->input(4);
    const Tensor& recurrent = context->input(5);
    const Tensor& recurrent_scale = context->input(6);
    const Tensor& projection = context->input(7);
    const Tensor& projection_scale = context->input(8);
    using tensorflow::errors::InvalidArgument;
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(c0.shape()) && TensorShapeUtils::IsMatrix(h0.shape()) &&
                             c0.dim_size(0) == h0.dim_size(0),
                InvalidArgument("c0 and h0 must be (batch, units) and (batch, output_dim); received ",
                                c0.shape().DebugString(), " and ", h0.shape().DebugString()));
    const int64 batch = c0.dim_size(0), units = c0.dim_size(1), output_dim = h0.dim_size(1);
    const bool projected = projection.NumElements() > 0;
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(gates.shape()) && gates.dim_size(1) == 4 * units,
                InvalidArgument("gates must be (rows, 4 * units = ", 4 * units, "); received ",
                                gates.shape().DebugString()));
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(recurrent.shape()) && recurrent.dim_size(0) == output_dim &&
                             recurrent.dim_size(1) == 4 * units,
                InvalidArgument("recurrent must be (output_dim, 4 * units) = (", output_dim, ", ", 4 * units,
                                "); received ", recurrent.shape().DebugString()));
    OP_REQUIRES(context, projected ? (TensorShapeUtils::IsMatrix(projection.shape()) &&
                                      projection.dim_size(0) == units && projection.dim_size(1) == output_dim)
                                   : output_dim == units,
                InvalidArgument("projection must be (units, output_dim) = (", units, ", ", output_dim,
                                "), or empty when output_dim = units; received ", projection.shape().DebugString()));
    OP_REQUIRES(context, recurrent_scale.NumElements() == 0 || recurrent_scale.NumElements() == 4 * units,
                InvalidArgument("recurrent_scale must have 4 * units values or none"));
    OP_REQUIRES(context, projection_scale.NumElements() == 0 || projection_scale.NumElements() == output_dim,
                InvalidArgument("projection_scale must have output_dim values or none"));
    OP_REQUIRES(context, TensorShapeUtils::IsVector(active.shape()) && TensorShapeUtils::IsVector(gate_index.shape()),
                InvalidArgument("active and gate_index must be vectors"));
    const auto rows_at = active.flat<int32_t>();
    const int64 steps = rows_at.size();
    int64 n_valid = 0, previous = batch;
    for (int64 t = 0; t < steps; ++t) {
      OP_REQUIRES(context, rows_at(t) >= 0 && rows_at(t) <= previous,
                  InvalidArgument("active must be non-increasing, between 0 and the batch (", batch,
                                  "); step ", t, " has ", rows_at(t)));
      previous = rows_at(t);
      n_valid += rows_at(t);
    }
    const int64 gate_rows = gates.dim_size(0);
    const bool indexed = gate_index.NumElements() > 0 || gate_rows != n_valid;
    const auto index = gate_index.flat<int32_t>();
    if (indexed) {
      OP_REQUIRES(context, gate_index.NumElements() == n_valid,
                  InvalidArgument("gate_index must have one entry per valid step (", n_valid, "); received ",
                                  gate_index.NumElements()));
      for (int64 k = 0; k < n_valid; ++k) {
        OP_REQUIRES(context, index(k) >= 0 && index(k) < gate_rows,
                    InvalidArgument("gate_index[", k, "] = ", index(k), " is outside the gates' ", gate_rows,
                                    " rows"));
      }
    }

    Tensor *outputs = nullptr, *c_out = nullptr, *h_out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({n_valid, output_dim}), &outputs));
    OP_REQUIRES_OK(context, context->allocate_output(1, c0.shape(), &c_out));
    OP_REQUIRES_OK(context, context->allocate_output(2, h0.shape(), &h_out));
    float* c = c_out->flat<float>().data();
    float* h = h_out->flat<float>().data();
    std::copy_n(c0.flat<float>().data(), batch * units, c);
    std::copy_n(h0.flat<float>().data(), batch * output_dim, h);
    const TfPool pool{Workers(context)};
    std::vector<Tensor> temporaries;
    // Where a scratch array found no memory, the context holds the allocation's status: the op fails.
    Recurrence<W>(
        pool, CellStep, TfScratch{context, &temporaries}, gates.flat<float>().data(),
        indexed ? index.data() : nullptr, rows_at.data(), steps, units, output_dim,
        reinterpret_cast<const W*>(recurrent.flat<T>().data()),
        recurrent_scale.NumElements() ? recurrent_scale.flat<float>().data() : nullptr,
        projected ? reinterpret_cast<const W*>(projection.flat<T>().data()) : nullptr,
        projection_scale.NumElements() ? projection_scale.flat<float>().data() : nullptr, cell_clip_, proj_clip_,
        outputs->flat<float>().data(), nullptr, c, h);
  }

 private:
  float cell_clip_, proj_clip_;
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


REGISTER_OP("BilmLstmRecurrence")
    .Input("gates: float")
    .Input("gate_index: int32")
    .Input("active: int32")
    .Input("c0: float")
    .Input("h0: float")
    .Input("recurrent: T")
    .Input("recurrent_scale: float")
    .Input("projection: T")
    .Input("projection_scale: float")
    .Output("outputs: float")
    .Output("c: float")
    .Output("h: float")
    .Attr("T: {bfloat16, int8, float}")
    .Attr("cell_clip: float")
    .Attr("proj_clip: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle c0, h0;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &c0));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &h0));
      c->set_output(0, c->Matrix(c->UnknownDim(), c->Dim(h0, 1)));
      c->set_output(1, c0);
      c->set_output(2, h0);
      return tensorflow::OkStatus();
    });

REGISTER_KERNEL_BUILDER(
    Name("BilmLstmRecurrence").Device(tensorflow::DEVICE_CPU).TypeConstraint<tensorflow::bfloat16>("T"),
    LstmRecurrenceOp<tensorflow::bfloat16, uint16_t>);
REGISTER_KERNEL_BUILDER(
    Name("BilmLstmRecurrence").Device(tensorflow::DEVICE_CPU).TypeConstraint<tensorflow::int8>("T"),
    LstmRecurrenceOp<tensorflow::int8, int8_t>);
#ifdef BILM_LOWBIT_AVX2
REGISTER_KERNEL_BUILDER(
    Name("BilmLstmRecurrence").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
    LstmRecurrenceOp<float, float>);
#endif

}  // namespace bilm
