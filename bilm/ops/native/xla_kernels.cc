// bilm's LSTM recurrence as an XLA custom call for JAX on a CPU (lstm_recurrence.h's `LstmRecurrence`, the
// loop TensorFlow's BilmLstmRecurrence op runs): XLA's buffers read and written in place, the work shared with
// XLA's own intra-op threads (its FFI `ThreadPool`), no OpenMP. Built against jaxlib's FFI headers
// (`jax.ffi.include_dir()`).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "lowbit_kernels.h"
#include "lstm_recurrence.h"
#include "xla/ffi/api/ffi.h"

namespace bilm {
namespace {

namespace ffi = xla::ffi;

// lowbit_kernels.h's `Pool` on the calling thread and XLA's intra-op threads. XLA may run this call on one of
// those threads while the others run other work, its own calls among them (the two directions of a layer), so
// a call never waits on a task still queued: its parts are claimed from a shared counter, the calling thread
// runs every part no other thread has started, and it waits only for parts already running.
class XlaPool {
 public:
  explicit XlaPool(ffi::ThreadPool* pool) : pool_(pool), threads_(std::max<int64>(1, pool->num_threads())) {}

  int64 Threads() const { return threads_; }

  template <typename F>
  void Blocks(int64 n, int64 cost, const F& f) const {
    if (n <= 0) return;
    if (threads_ <= 1 || n == 1 || n * cost < kMinParallelCycles) {
      f(0, n);
      return;
    }
    const int64 parts = std::min(threads_, n), each = (n + parts - 1) / parts;
    Share(parts, [&](int64 i) {
      const int64 begin = i * each;
      if (begin < n) f(begin, std::min(n, begin + each));
    });
  }

  template <typename F>
  void Tasks(int64 n, const F& f) const {
    if (n <= 0) return;
    if (threads_ <= 1 || n == 1) {
      f(0, n);
      return;
    }
    Share(n, [&](int64 i) { f(i, i + 1); });
  }

 private:
  // The parts' shared state: it outlives the call, for a task that starts after the call returned (it finds
  // no part left and touches nothing else).
  struct Shared {
    std::atomic<int64> next{0};
    std::atomic<int64> done{0};
    int64 parts = 0;
    const void* part = nullptr;
    void (*run)(const void*, int64) = nullptr;

    // Runs parts until none is left unclaimed.
    void Work() {
      for (int64 i = next.fetch_add(1); i < parts; i = next.fetch_add(1)) {
        run(part, i);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };

  template <typename G>
  void Share(int64 parts, const G& part) const {
    auto shared = std::make_shared<Shared>();
    shared->parts = parts;
    shared->part = &part;
    shared->run = [](const void* p, int64 i) { (*static_cast<const G*>(p))(i); };
    for (int64 t = 1; t < std::min(threads_, parts); ++t) pool_->Schedule([shared] { shared->Work(); });
    shared->Work();
    while (shared->done.load(std::memory_order_acquire) < parts) std::this_thread::yield();
  }

  ffi::ThreadPool* pool_;
  int64 threads_;
};

const void* DataOrNull(const ffi::AnyBuffer& buffer) {
  return buffer.element_count() > 0 ? buffer.untyped_data() : nullptr;
}

// The custom call `bilm_lstm_recurrence`: portable_kernels.cc's `bilm_lstm_recurrence` on XLA's buffers.
//   gates (gate_rows, 4 * units) float32; gate_index, index (at least the packed entries,) int32; bias
//   (4 * units,) or (0,) for none; active (steps,) int32, non-increasing; recurrent (output_dim, 4 * units) and
//   projection (units, output_dim) or (0,) for none, both float32 or both bfloat16; c0, h0 the sorted rows'
//   initial states (batch, units), (batch, output_dim); attributes cell_clip, proj_clip (negative for none).
//   Results: outputs (steps, batch, output_dim), each packed entry's at `index`, zeros elsewhere; c, h the
//   sorted rows' final states.
ffi::Error LstmRecurrenceCall(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> gates, ffi::Buffer<ffi::S32> gate_index,
                              ffi::Buffer<ffi::F32> bias, ffi::Buffer<ffi::S32> index, ffi::Buffer<ffi::S32> active,
                              ffi::AnyBuffer recurrent, ffi::AnyBuffer projection, ffi::Buffer<ffi::F32> c0,
                              ffi::Buffer<ffi::F32> h0, float cell_clip, float proj_clip,
                              ffi::ResultBuffer<ffi::F32> outputs, ffi::ResultBuffer<ffi::F32> c,
                              ffi::ResultBuffer<ffi::F32> h) {
  const auto c_dims = c0.dimensions(), h_dims = h0.dimensions();
  if (c_dims.size() != 2 || h_dims.size() != 2 || c_dims[0] != h_dims[0]) {
    return ffi::Error::InvalidArgument("bilm_lstm_recurrence: c0 and h0 are not (batch, units), (batch, output_dim)");
  }
  const int64 batch = c_dims[0], units = c_dims[1], output_dim = h_dims[1];
  const int64 steps = active.element_count();
  if (recurrent.element_count() != output_dim * 4 * units || outputs->element_count() != steps * batch * output_dim ||
      (projection.element_count() != 0 && projection.element_count() != units * output_dim) ||
      (projection.element_count() != 0 && projection.element_type() != recurrent.element_type()) ||
      (bias.element_count() != 0 && bias.element_count() != 4 * units)) {
    return ffi::Error::InvalidArgument("bilm_lstm_recurrence: the kernels, bias or outputs do not fit the states");
  }
  std::copy_n(c0.typed_data(), c0.element_count(), c->typed_data());
  std::copy_n(h0.typed_data(), h0.element_count(), h->typed_data());
  const XlaPool workers(&pool);
  const float* bias_data = bias.element_count() > 0 ? bias.typed_data() : nullptr;
  int failed;
  if (recurrent.element_type() == ffi::F32) {
    failed = LstmRecurrence(workers, gates.typed_data(), gate_index.typed_data(), bias_data, index.typed_data(),
                            active.typed_data(), steps, batch, units, output_dim,
                            static_cast<const float*>(recurrent.untyped_data()),
                            static_cast<const float*>(DataOrNull(projection)), cell_clip, proj_clip,
                            outputs->typed_data(), c->typed_data(), h->typed_data());
  } else if (recurrent.element_type() == ffi::BF16) {
    failed = LstmRecurrence(workers, gates.typed_data(), gate_index.typed_data(), bias_data, index.typed_data(),
                            active.typed_data(), steps, batch, units, output_dim,
                            static_cast<const uint16_t*>(recurrent.untyped_data()),
                            static_cast<const uint16_t*>(DataOrNull(projection)), cell_clip, proj_clip,
                            outputs->typed_data(), c->typed_data(), h->typed_data());
  } else {
    return ffi::Error::InvalidArgument("bilm_lstm_recurrence: kernels are float32 or bfloat16");
  }
  if (failed) return ffi::Error(ffi::ErrorCode::kResourceExhausted, "bilm_lstm_recurrence: no memory for scratch");
  return ffi::Error::Success();
}

}  // namespace
}  // namespace bilm

XLA_FFI_DEFINE_HANDLER_SYMBOL(BilmLstmRecurrence, bilm::LstmRecurrenceCall,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Attr<float>("cell_clip")
                                  .Attr<float>("proj_clip")
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>());
