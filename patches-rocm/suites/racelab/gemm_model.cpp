// gemm_model.cpp: the GEMM both library models enqueue (docs/race-lab.md).
//
// Runs on a stream's worker thread: checks that every range it touches lies
// in a live hipMalloc allocation, then computes D = alpha op(A) op(B) + beta C
// exactly in float. With a workspace it is split-K: up to 4 slices of K each
// write their partial sums for a chunk of outputs into the workspace (slice
// after slice, so the partials sit there while the rest is computed), then the
// chunk is reduced from the workspace into D. Two GEMMs on two streams over
// one workspace read each other's partials: wrong outputs, as on a GPU.

#include "racelab.h"

#include <algorithm>
#include <vector>

namespace racelab {
namespace {

size_t type_size_(hipDataType t) {
  switch (t) {
    case HIP_R_32F:
      return 4;
    case HIP_R_16F:
    case HIP_R_16BF:
      return 2;
    default:
      return 0;
  }
}

__attribute__((no_sanitize("thread"))) float load(const void* base, size_t index, hipDataType t) {
  switch (t) {
    case HIP_R_32F:
      return static_cast<const float*>(base)[index];
    case HIP_R_16BF:
      return racelab::bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case HIP_R_16F:
      return racelab::f16_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return 0.0f;
  }
}

__attribute__((no_sanitize("thread"))) void store(void* base, size_t index, hipDataType t, float v) {
  switch (t) {
    case HIP_R_32F:
      static_cast<float*>(base)[index] = v;
      break;
    case HIP_R_16BF:
      static_cast<uint16_t*>(base)[index] = racelab::float_to_bf16(v);
      break;
    case HIP_R_16F:
      static_cast<uint16_t*>(base)[index] = racelab::float_to_f16(v);
      break;
    default:
      break;
  }
}


// Bytes from the first to one past the last element of a (batched) matrix.
size_t extent(int64_t ld, uint64_t cols, uint64_t rows, int32_t batch, int64_t stride,
              hipDataType t) {
  size_t one = static_cast<size_t>(ld) * (cols - 1) + rows;
  size_t last = static_cast<size_t>(batch - 1) * static_cast<size_t>(stride) + one;
  return last * type_size_(t);
}

// ThreadSanitizer sees the GEMM's memory traffic through these range
// annotations rather than per element: the arithmetic below is compiled
// without instrumentation (no_sanitize) so a run takes seconds, not minutes,
// and each range is announced when the kernel touches it.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
#define RACELAB_TSAN_RANGES 1
#endif
#endif

void announce_read(const void* p, size_t n) {
#ifdef RACELAB_TSAN_RANGES
  __tsan_read_range(const_cast<void*>(p), n);
#else
  (void)p;
  (void)n;
#endif
}

void announce_write(void* p, size_t n) {
#ifdef RACELAB_TSAN_RANGES
  __tsan_write_range(p, n);
#else
  (void)p;
  (void)n;
#endif
}

// op(A) of batch b as a row-major M x K float matrix (and op(B) as K x N).
__attribute__((no_sanitize("thread"))) void unpack(const GemmPlan& p, const void* A, const void* B,
                                                   int32_t b, float* af, float* bf) {
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t kk = 0; kk < p.k; ++kk) {
      size_t ai = p.ta ? static_cast<size_t>(kk + i * p.lda) : static_cast<size_t>(i + kk * p.lda);
      af[i * p.k + kk] = load(A, static_cast<size_t>(b * p.sa) + ai, p.ta_type);
    }
  }
  for (int64_t kk = 0; kk < p.k; ++kk) {
    for (int64_t j = 0; j < p.n; ++j) {
      size_t bi = p.tb ? static_cast<size_t>(j + kk * p.ldb) : static_cast<size_t>(kk + j * p.ldb);
      bf[kk * p.n + j] = load(B, static_cast<size_t>(b * p.sb) + bi, p.tb_type);
    }
  }
}

// out[e - e0] = sum over k in [k0, k1) of op(A)[i][k] op(B)[k][j], e = i + j M.
__attribute__((no_sanitize("thread"))) void partial_sums(const GemmPlan& p, const float* af,
                                                         const float* bf, int64_t e0, int64_t e1,
                                                         int64_t k0, int64_t k1, float* out) {
  for (int64_t e = e0; e < e1; ++e) {
    int64_t i = e % p.m, j = e / p.m;
    float acc = 0.0f;
    for (int64_t kk = k0; kk < k1; ++kk) {
      acc += af[i * p.k + kk] * bf[kk * p.n + j];
    }
    out[e - e0] = acc;
  }
}

// D = alpha * (sum of the slices' partials) + beta * C for elements [e0, e1).
__attribute__((no_sanitize("thread"))) void reduce(const GemmPlan& p, int32_t b, const float* partial,
                                                   int64_t stride, int64_t slices, int64_t e0,
                                                   int64_t e1, float alpha, float beta,
                                                   const void* C, void* D) {
  for (int64_t e = e0; e < e1; ++e) {
    int64_t i = e % p.m, j = e / p.m;
    float acc = 0.0f;
    for (int64_t s = 0; s < slices; ++s) {
      acc += partial[s * stride + (e - e0)];
    }
    float c = beta != 0.0f ? load(C, static_cast<size_t>(b * p.sc + i + j * p.ldc), p.tc_type)
                           : 0.0f;
    store(D, static_cast<size_t>(b * p.sd + i + j * p.ldd), p.td_type, alpha * acc + beta * c);
  }
}

} // namespace

size_t type_size(hipDataType t) {
  return type_size_(t);
}

// The GEMM, run on the stream's worker thread.
void run_gemm(const GemmPlan& p, float alpha, float beta, const void* A, const void* B, const void* C,
              void* D, void* ws, size_t ws_bytes) {
  static const long long kernel_us = env_int("OVERLAY_STUB_KERNEL_US", 0);
  uint64_t a_rows = p.ta ? p.k : p.m;
  uint64_t b_rows = p.tb ? p.n : p.k;
  size_t a_bytes = extent(p.lda, p.a_cols, a_rows, p.batch, p.sa, p.ta_type);
  size_t b_bytes = extent(p.ldb, p.b_cols, b_rows, p.batch, p.sb, p.tb_type);
  size_t c_bytes = extent(p.ldc, p.c_cols, p.m, p.batch, p.sc, p.tc_type);
  size_t d_bytes = extent(p.ldd, p.d_cols, p.m, p.batch, p.sd, p.td_type);
  // Every range is checked (and reported) before any is touched.
  int bad = 0;
  bad += !racelab::check_device_range(A, a_bytes, "hipblasLtMatmul A");
  bad += !racelab::check_device_range(B, b_bytes, "hipblasLtMatmul B");
  bad += !racelab::check_device_range(D, d_bytes, "hipblasLtMatmul D");
  if (beta != 0.0f) {
    bad += !racelab::check_device_range(C, c_bytes, "hipblasLtMatmul C");
  }
  if (ws_bytes > 0) {
    bad += !racelab::check_device_range(ws, ws_bytes, "hipblasLtMatmul workspace");
  }
  bool ok = bad == 0;
  if (!ok) {
    return;
  }
  announce_read(A, a_bytes);
  announce_read(B, b_bytes);
  if (beta != 0.0f) {
    announce_read(C, c_bytes);
  }
  // Split-K over the workspace: S slices of K; for each chunk of E output
  // elements, every slice writes its partial sums into ws[s * E ...] (slice
  // after slice, so the partials sit in the workspace while the rest is
  // computed), then the chunk is reduced from the workspace into D. Without
  // a workspace the partials stay in this task's own memory.
  int64_t slices = std::min<int64_t>(4, p.k);
  const int64_t total = p.m * p.n;
  int64_t chunk = total;
  std::vector<float> own;
  float* partial = nullptr;
  if (ws_bytes > 0) {
    chunk = static_cast<int64_t>(ws_bytes / (sizeof(float) * slices));
    if (chunk == 0) {
      slices = 1;
      chunk = static_cast<int64_t>(ws_bytes / sizeof(float));
    }
    chunk = std::min(chunk, total);
    partial = static_cast<float*>(ws);
  } else {
    own.resize(static_cast<size_t>(slices * chunk));
    partial = own.data();
  }
  std::vector<float> af(static_cast<size_t>(p.m * p.k)), bf(static_cast<size_t>(p.k * p.n));
  for (int32_t b = 0; b < p.batch; ++b) {
    unpack(p, A, B, b, af.data(), bf.data());
    for (int64_t e0 = 0; e0 < total; e0 += chunk) {
      int64_t e1 = std::min(total, e0 + chunk);
      for (int64_t s = 0; s < slices; ++s) {
        int64_t k0 = p.k * s / slices, k1 = p.k * (s + 1) / slices;
        partial_sums(p, af.data(), bf.data(), e0, e1, k0, k1, partial + s * chunk);
        announce_write(partial + s * chunk, static_cast<size_t>(e1 - e0) * sizeof(float));
      }
      // OVERLAY_STUB_KERNEL_US (default 0): time the partials sit in the
      // workspace before the reduction, as a longer kernel keeps them there.
      racelab::busy_wait_us(kernel_us);
      for (int64_t s = 0; s < slices; ++s) {
        announce_read(partial + s * chunk, static_cast<size_t>(e1 - e0) * sizeof(float));
      }
      reduce(p, b, partial, chunk, slices, e0, e1, alpha, beta, C, D);
    }
  }
  announce_write(D, d_bytes);
}

} // namespace racelab
