// device_shim.cpp: what the exported mlx/backend/rocm/device.cpp and worker.cpp
// need from the rest of MLX, defined here so they link without libmlx
// (docs/race-lab.md). The Device, CommandEncoder and Worker members themselves
// are the exported tree's own code; only these few helpers are ours.

#include "mlx/backend/rocm/device.h"
#include "mlx/device.h"
#include "mlx/stream.h"
#include "mlx/utils.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mlx::core {

const Device& default_device() {
  static const Device d(Device::gpu, 0);
  return d;
}

Stream default_stream(Device d) {
  return Stream(0, d);
}

void check_hip_error(const char* name, hipError_t err) {
  if (err != hipSuccess) {
    throw std::runtime_error(std::string(name) + " failed: " + hipGetErrorString(err));
  }
}

namespace env {

int get_var(const char* name, int default_value) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : default_value;
}

} // namespace env

HipStream::HipStream(rocm::Device& device) {
  device.make_current();
  check_hip_error("hipStreamCreateWithFlags",
                  hipStreamCreateWithFlags(&handle_, hipStreamNonBlocking));
}

namespace rocm {

// The patched ~CommandEncoder frees the stream's hipBLASLt workspace; this
// child links no hipBLASLt code, so there is none. Weak: a child that links
// the real gemms/hipblaslt_gemm.cpp gets its definition instead.
__attribute__((weak)) void hipblaslt_release_stream_workspace(hipStream_t) {}

} // namespace rocm

} // namespace mlx::core
