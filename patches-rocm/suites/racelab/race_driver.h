// race_driver.h: what the race lab's drivers share (docs/race-lab.md): the
// barrier, the integer inputs and their exact references, the dtype encoding,
// and the finding lines the suite runner counts.

#pragma once

#include "racelab.h"

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace racelab::driver {

// A one-shot barrier (the drivers build as C++20 but keep to what MLX's
// suites use).
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

inline std::vector<int32_t> ints(std::mt19937& rng, size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) {
    x = d(rng);
  }
  return v;
}

// Row-major C[b] = A[b] (M x K) * B'[b], B' = B (K x N) or B^T (B stored N x K).
inline std::vector<int32_t> reference(const std::vector<int32_t>& A, const std::vector<int32_t>& B,
                               int batch, int M, int N, int K, bool b_transposed) {
  std::vector<int32_t> C(static_cast<size_t>(batch) * M * N, 0);
  for (int b = 0; b < batch; ++b) {
    const int32_t* a = A.data() + static_cast<size_t>(b) * M * K;
    const int32_t* bb = B.data() + static_cast<size_t>(b) * K * N;
    int32_t* c = C.data() + static_cast<size_t>(b) * M * N;
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        int32_t acc = 0;
        for (int k = 0; k < K; ++k) {
          acc += a[i * K + k] * (b_transposed ? bb[j * K + k] : bb[k * N + j]);
        }
        c[i * N + j] = acc;
      }
    }
  }
  return C;
}

// Host bits of integer values in the GEMM's dtype.
inline std::vector<uint8_t> encode(const std::vector<int32_t>& v, bool bf16) {
  std::vector<uint8_t> out(v.size() * (bf16 ? 2 : 4));
  for (size_t i = 0; i < v.size(); ++i) {
    if (bf16) {
      uint16_t h = racelab::float_to_bf16(static_cast<float>(v[i]));
      std::memcpy(out.data() + 2 * i, &h, 2);
    } else {
      float f = static_cast<float>(v[i]);
      std::memcpy(out.data() + 4 * i, &f, 4);
    }
  }
  return out;
}

inline float decode(const std::vector<uint8_t>& raw, size_t i, bool bf16) {
  if (bf16) {
    uint16_t h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    return racelab::bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, raw.data() + 4 * i, 4);
  return f;
}

// Prints "overlay-suite: report <kind>: thread T round R: <what>".
inline void finding(const char* kind, int t, int r, const std::string& what) {
  racelab::report(kind, "thread " + std::to_string(t) + " round " + std::to_string(r) + ": " + what);
}

// "" when `got` equals `ref` exactly, else a description of the first mismatch.
inline std::string mismatch(const std::vector<uint8_t>& got, const std::vector<int32_t>& ref,
                            bool bf16) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (decode(got, i, bf16) != static_cast<float>(ref[i]) && bad++ == 0) {
      first = i;
    }
  }
  if (bad == 0) {
    return "";
  }
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%zu of %zu elements differ; first at %zu: got %.9g, want %d", bad,
                ref.size(), first, static_cast<double>(decode(got, first, bf16)), ref[first]);
  return buf;
}

} // namespace racelab::driver
