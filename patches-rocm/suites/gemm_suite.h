// Shared harness for the GEMM concurrency suite children
// (hipblaslt_concurrency, rocblas_handle_concurrency).
//
// Shape (seed 000): kThreads threads, each on its own GPU stream from one
// ThreadLocalStream, meet at a barrier before any GPU matmul has run in the
// process, then run kRounds rounds of their GEMMs. All threads use the same
// shapes, so they contend on the same library handles, pipe keys and
// workspaces. Inputs are small integers from a per-thread seed, so every
// output is an integer exactly representable in the output dtype, and each
// output, cast to float32 on the GPU, must equal a host int32 reference
// exactly.
//
// A child prints "overlay-suite: done" on stdout as its last act and exits 0
// when every check passed; on any mismatch or error it prints FAIL lines on
// stderr and exits 1. Without a GPU it prints SKIPPED and exits 77.

#pragma once

#include "mlx/mlx.h"

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace overlay_suite {

namespace mx = mlx::core;

constexpr int kThreads = 8;
constexpr int kRounds = 33;

// std::barrier is C++20; MLX builds as C++17, so a mutex + condition variable.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lk(m_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return gen != gen_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_;
  int count_{0};
  int gen_{0};
};

// Integers uniform in [lo, hi].
inline std::vector<int32_t>
ints(std::mt19937& rng, size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) {
    x = d(rng);
  }
  return v;
}

inline mx::array to_array(
    const std::vector<int32_t>& v,
    const mx::Shape& shape,
    mx::Dtype dtype,
    mx::Stream s) {
  std::vector<float> f(v.begin(), v.end());
  mx::array a(f.begin(), shape, mx::float32);
  return dtype == mx::float32 ? a : mx::astype(a, dtype, s);
}

// C[b][i][j] = sum_k A[b][i][k] * B'[b][k][j], where B' is B, or B transposed
// when b_transposed (then B is stored [b][j][k]).
inline std::vector<int32_t> reference(
    const std::vector<int32_t>& A,
    const std::vector<int32_t>& B,
    int batch,
    int M,
    int N,
    int K,
    bool b_transposed) {
  std::vector<int32_t> C(static_cast<size_t>(batch) * M * N, 0);
  for (int b = 0; b < batch; ++b) {
    const int32_t* a = A.data() + static_cast<size_t>(b) * M * K;
    const int32_t* bb = B.data() + static_cast<size_t>(b) * K * N;
    int32_t* c = C.data() + static_cast<size_t>(b) * M * N;
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        int32_t acc = 0;
        for (int k = 0; k < K; ++k) {
          int32_t bv = b_transposed ? bb[j * K + k] : bb[k * N + j];
          acc += a[i * K + k] * bv;
        }
        c[i * N + j] = acc;
      }
    }
  }
  return C;
}

// Compare a float32 GPU result with the int32 reference exactly. Returns an
// empty string when equal, else a description of the first mismatch.
inline std::string compare(
    const mx::array& out,
    const std::vector<int32_t>& ref,
    const std::string& what) {
  if (out.dtype() != mx::float32 || out.size() != ref.size()) {
    return what + ": wrong dtype or size";
  }
  const float* p = out.data<float>();
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (p[i] != static_cast<float>(ref[i])) {
      if (bad == 0) {
        first = i;
      }
      ++bad;
    }
  }
  if (bad == 0) {
    return "";
  }
  char buf[256];
  std::snprintf(
      buf,
      sizeof(buf),
      ": %zu of %zu elements differ; first at %zu: got %.9g, want %d",
      bad,
      ref.size(),
      first,
      static_cast<double>(p[first]),
      ref[first]);
  return what + buf;
}

// One thread's work for one round. Returns "" or the first failure.
using RoundFn = std::function<std::string(int thread, int round, std::mt19937&, mx::Stream)>;

// Runs the suite and returns the process exit status.
inline int run_suite(const char* name, const RoundFn& round_fn) {
  if (!mx::is_available(mx::Device::gpu)) {
    std::printf("%s: SKIPPED: no GPU device\n", name);
    return 77;
  }
  // Create the GPU Device and its default stream on the main thread, with a
  // non-matmul op, so the worker threads find it; no GEMM runs before the
  // barrier.
  {
    mx::Stream s0 = mx::default_stream(mx::Device::gpu);
    mx::array w = mx::add(mx::array(1.0f), mx::array(2.0f), s0);
    mx::eval(w);
    if (w.item<float>() != 3.0f) {
      std::fprintf(stderr, "%s: FAIL: warm-up add is wrong\n", name);
      return 1;
    }
  }
  mx::ThreadLocalStream tls = mx::new_thread_local_stream(mx::Device::gpu);
  Barrier barrier(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<int> rounds_done(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bool waited = false;
      try {
        // This thread's own stream (created here, before the barrier).
        mx::Stream s = mx::stream_from_thread_local_stream(tls);
        std::mt19937 rng(0x5eed0000u + static_cast<uint32_t>(t));
        barrier.arrive_and_wait();
        waited = true;
        for (int r = 0; r < kRounds; ++r) {
          std::string e = round_fn(t, r, rng, s);
          if (!e.empty()) {
            errors[t] = "thread " + std::to_string(t) + " round " +
                std::to_string(r) + ": " + e;
            return;
          }
          rounds_done[t] = r + 1;
        }
        mx::synchronize(s);
      } catch (const std::exception& ex) {
        errors[t] = "thread " + std::to_string(t) + ": exception: " + ex.what();
      } catch (...) {
        errors[t] = "thread " + std::to_string(t) + ": unknown exception";
      }
      if (!waited) {
        // Do not leave the others waiting forever.
        barrier.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  int failed = 0;
  int total_rounds = 0;
  for (int t = 0; t < kThreads; ++t) {
    total_rounds += rounds_done[t];
    if (!errors[t].empty()) {
      std::fprintf(stderr, "%s: FAIL: %s\n", name, errors[t].c_str());
      ++failed;
    }
  }
  if (failed) {
    std::fprintf(
        stderr,
        "%s: %d of %d threads failed (%d of %d rounds completed)\n",
        name,
        failed,
        kThreads,
        total_rounds,
        kThreads * kRounds);
    return 1;
  }
  std::printf(
      "%s: %d threads x %d rounds exact\n", name, kThreads, kRounds);
  std::printf("overlay-suite: done\n");
  std::fflush(stdout);
  return 0;
}

} // namespace overlay_suite
