#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "pjrt_sim/cpu_isa.h"
#include "pjrt_sim/kernels/gemm.h"

// oneDNN's CPU runtime here is OpenMP (Debian's libdnnl). Declared, not included: omp.h comes with the
// compiler (GCC's is not clang's), and this is the one OpenMP call lazyrt makes.
extern "C" void omp_set_num_threads(int num_threads);

namespace lazyrt::pjrt {
namespace {

// Every call runs on its caller's thread alone. The device splits a product into panels over its own
// pool; an OpenMP team per pool thread would put 2 x 2 threads on 2 cores, and an idle team's threads
// spin (GOMP_SPINCOUNT) against the pool's. OpenMP's thread count is a per-thread setting: set it once
// on each thread that calls oneDNN.
void OneDnnSingleThreaded() {
  thread_local const bool set = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)set;
}

// One matmul primitive per (shape, strides) and thread: building one takes tens of microseconds (a
// JIT kernel the first time), executing it a few. Per thread, because a primitive's library-managed
// scratchpad is not to be shared by concurrent executions.
// (m, n, k, A's strides, B's strides, C's row stride or kF32Sgemm; for a matmul its operand and result types
// and whether it adds a bias, packed in one number).
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
constexpr int64_t kF32Sgemm = -1;  // in an f32 GEMM's key, where a matmul's has C's row stride

// A primitive with its operands' memory objects and execution arguments, built once: a call only points
// them at its arrays (building three memory objects and the argument map took most of a small product's
// time: 64x128x32 in 2.7 us).
struct Matmul {
  dnnl::memory a, b, c, bias;
  dnnl::matmul primitive;
  std::unordered_map<int, dnnl::memory> args;
};

struct OneDnnThread {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  absl::node_hash_map<MatmulKey, Matmul> matmuls;  // a node map: each call uses its entry in place
};

OneDnnThread& ThisThread() {
  thread_local OneDnnThread state;
  return state;
}

std::atomic<void (*)()> g_statics_hook{nullptr};

// Serializes first calls of every kind (a template's static would be one mutex per instantiation).
std::mutex g_first_calls;

// Runs one oneDNN call. The first call of each shape on a thread creates oneDNN's objects for it (a
// primitive, JIT kernels, the library's lazily built caches and settings), and those first calls run one
// at a time in the process: oneDNN synchronizes them inside itself with code ThreadSanitizer cannot see
// (the library is not instrumented), and a thread meeting a shape another thread is creating would wait
// for it anyway. They are rare: once per shape and thread. After a first call the statics hook runs (a
// superset of the calls that create oneDNN's statics). A shape oneDNN refused on its first call is refused
// from then on without asking again: a second attempt would create its objects again, outside the lock,
// every call.

template <typename Call>
bool CallOneDnn(const MatmulKey& key, Call call) {
  // Hashed: every call looks its shape up (the GPT's attention makes thousands of small products a step, and
  // an ordered set's comparisons of nine-number keys were 0.15% of its samples).
  thread_local absl::flat_hash_set<MatmulKey> seen, refused;
  if (seen.contains(key)) return call();
  if (refused.contains(key)) return false;
  const std::lock_guard<std::mutex> lock(g_first_calls);
  const bool ok = call();
  (ok ? seen : refused).insert(key);
  if (void (*hook)() = g_statics_hook.load(std::memory_order_acquire)) hook();
  return ok;
}

}  // namespace

void SetLibraryStaticsHook(void (*hook)()) { g_statics_hook.store(hook, std::memory_order_release); }

bool OneDnnGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                MatrixView<float> c) {
  const std::optional<RowMajorOperand> oa = AsRowMajor(a.row_stride, a.col_stride, m, k),
                                       ob = AsRowMajor(b.row_stride, b.col_stride, k, n),
                                       oc = AsRowMajor(c.row_stride, c.col_stride, m, n);
  if (k == 0 || !oa || !ob || !oc || oc->transposed) return false;  // k = 0: Gemm writes the zeros
  OneDnnSingleThreaded();
  return CallOneDnn({m, n, k, a.row_stride, a.col_stride, b.row_stride, b.col_stride, kF32Sgemm, 0}, [&] {
    return dnnl_sgemm(oa->transposed ? 'T' : 'N', ob->transposed ? 'T' : 'N', m, n, k, 1.0f, a.data, oa->ld, b.data,
                      ob->ld, 0.0f, c.data, oc->ld) == dnnl_success;
  });
}

bool OneDnnHasBf16() {
  static const bool has = HostHas("avx512_bf16") || HostHas("amx_bf16");
  return has;
}

namespace {

// C of `Out` (f32, or bf16 as its bits) = A B through oneDNN's matmul primitive (its brgemm kernels on
// AVX-512), operands of `In` (f32, or bf16 as its bits, accumulated in f32).
// With `bias` (f32 C only), n values added to each row of the product as the primitive stores it: each sum
// rounded once, the bits of adding them to the stored product.
template <typename In, typename Out>
bool OneDnnMatmulInto(int64_t m, int64_t n, int64_t k, MatrixView<const In> a, MatrixView<const In> b,
                      MatrixView<Out> c, const float* bias = nullptr) {
  if (m <= 0 || n <= 0 || k <= 0 || c.col_stride != 1) return false;
  OneDnnSingleThreaded();
  using dnnl::memory;
  constexpr memory::data_type kIn = std::is_same_v<In, float> ? memory::data_type::f32 : memory::data_type::bf16;
  constexpr memory::data_type kOut = std::is_same_v<Out, float> ? memory::data_type::f32 : memory::data_type::bf16;
  const MatmulKey key{m,
                      n,
                      k,
                      a.row_stride,
                      a.col_stride,
                      b.row_stride,
                      b.col_stride,
                      c.row_stride,
                      int64_t{(static_cast<int>(kIn) * 256 + static_cast<int>(kOut)) * 2 + (bias != nullptr)}};
  return CallOneDnn(key, [&] {
    OneDnnThread& state = ThisThread();  // built by a thread's first call: under the first calls' lock
    try {
      auto it = state.matmuls.find(key);
      if (it == state.matmuls.end()) {
        const memory::desc ad({m, k}, kIn, {a.row_stride, a.col_stride});
        const memory::desc bd({k, n}, kIn, {b.row_stride, b.col_stride});
        const memory::desc cd({m, n}, kOut, {c.row_stride, 1});
        const memory::desc biasd({1, n}, memory::data_type::f32, {n, 1});
        const dnnl::matmul::primitive_desc pd(
            bias != nullptr ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd), state.engine);
        Matmul mm{memory(ad, state.engine, DNNL_MEMORY_NONE),
                  memory(bd, state.engine, DNNL_MEMORY_NONE),
                  memory(cd, state.engine, DNNL_MEMORY_NONE),
                  memory(biasd, state.engine, DNNL_MEMORY_NONE),
                  dnnl::matmul(pd),
                  {}};
        mm.args = {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}};
        if (bias != nullptr) mm.args.emplace(DNNL_ARG_BIAS, mm.bias);
        it = state.matmuls.emplace(key, std::move(mm)).first;
      }
      Matmul& mm = it->second;
      // oneDNN takes non-const handles to its inputs but only reads them.
      mm.a.set_data_handle(const_cast<In*>(a.data));
      mm.b.set_data_handle(const_cast<In*>(b.data));
      mm.c.set_data_handle(c.data);
      if (bias != nullptr) mm.bias.set_data_handle(const_cast<float*>(bias));
      mm.primitive.execute(state.stream, mm.args);
      state.stream.wait();
      return true;
    } catch (const dnnl::error&) {
      return false;  // a layout or type no implementation takes here: the caller falls back
    }
  });
}

}  // namespace

bool OneDnnMatmulGemm(int64_t m, int64_t n, int64_t k, MatrixView<const float> a, MatrixView<const float> b,
                      MatrixView<float> c, const float* bias) {
  return OneDnnMatmulInto(m, n, k, a, b, c, bias);
}

bool OneDnnGemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a, MatrixView<const uint16_t> b,
                    MatrixView<float> c) {
  return OneDnnHasBf16() && OneDnnMatmulInto(m, n, k, a, b, c);
}

bool OneDnnGemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a, MatrixView<const uint16_t> b,
                    MatrixView<uint16_t> c) {
  return OneDnnHasBf16() && OneDnnMatmulInto(m, n, k, a, b, c);
}

}  // namespace lazyrt::pjrt
