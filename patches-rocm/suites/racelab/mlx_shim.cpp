// mlx_shim.cpp: the few MLX members the exported hipblaslt_gemm.cpp calls,
// defined here so the file links without libmlx (docs/race-lab.md).
//
// Compiled against the same exported tree as the file under test, so every
// class layout comes from that tree's headers; only these member bodies are
// ours, and each does the least the file's callers need:
//
//   * graphs are off: use_hip_graphs(), stream_capturing() and
//     graph_decode_mode() are false (as in the fork, whose use_hip_graphs()
//     always returns false), so launch_kernel() runs the GEMM at once on the
//     encoder's stream, and the graph-only members are never reached (they
//     abort if they are);
//   * set_input_array/set_output_array are the graph dependency bookkeeping,
//     a no-op with graphs off;
//   * a CommandEncoder owns one HIP stream of the model; its destructor frees
//     the stream's hipBLASLt workspace first when the file under test defines
//     hipblaslt_release_stream_workspace (patch 0002's device.cpp does that in
//     ~CommandEncoder while the stream still exists), then destroys the stream;
//   * an array made by the driver wraps a RocmBuffer the driver owns; the
//     array members defined here build just the descriptor the file reads
//     (buffer and offset).

#include "mlx/array.h"
#include "mlx/backend/rocm/allocator.h"
#include "mlx/backend/rocm/device.h"
#include "mlx/backend/rocm/worker.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mlx::core::rocm {
// Weak: the forked file has no such function; the patched one defines it.
__attribute__((weak)) void hipblaslt_release_stream_workspace(hipStream_t stream);
} // namespace mlx::core::rocm

namespace {

[[noreturn]] void unreachable(const char* what) {
  std::fprintf(stderr, "race-lab shim: %s is not modelled (graphs are off)\n", what);
  std::abort();
}

} // namespace

namespace mlx::core {

void check_hip_error(const char* name, hipError_t err) {
  if (err != hipSuccess) {
    throw std::runtime_error(std::string(name) + " failed: " + hipGetErrorString(err));
  }
}

array::array(allocator::Buffer data, Shape shape, Dtype dtype, Deleter deleter)
    : array_desc_(std::make_shared<ArrayDesc>(std::move(shape), dtype)) {
  array_desc_->data = std::make_shared<Data>(data, std::move(deleter));
  array_desc_->data_size = array_desc_->size;
  array_desc_->status = Status::available;
}

array::~array() {}

array::ArrayDesc::ArrayDesc(Shape shape_, Dtype dtype_)
    : shape(std::move(shape_)), dtype(dtype_), status(Status::available) {
  // Row-major contiguous strides, as MLX's own init() computes them.
  size = 1;
  strides.resize(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = static_cast<int64_t>(size);
    size *= static_cast<size_t>(shape[i]);
  }
}

array::ArrayDesc::~ArrayDesc() {}

namespace rocm {

bool use_hip_graphs() {
  return false;
}

bool stream_capturing() {
  return false;
}

bool graph_decode_mode() {
  return false;
}

void record_inline_launch() {}

RocmAllocator& allocator() {
  unreachable("rocm::allocator() (a host-dirty buffer)");
}

void RocmAllocator::flush_host_shadow(RocmBuffer&) {
  unreachable("RocmAllocator::flush_host_shadow");
}

Worker::~Worker() {}

Device::Device(int device) : device_(device) {}

Device::~Device() {}

void Device::make_current() {
  check_hip_error("hipSetDevice", hipSetDevice(device_));
}

CommandEncoder::CommandEncoder(Device& d) : device_(d), stream_(d) {}

CommandEncoder::~CommandEncoder() {
  if (hipblaslt_release_stream_workspace != nullptr) {
    hipblaslt_release_stream_workspace(static_cast<hipStream_t>(stream_));
  }
}

void CommandEncoder::set_input_array(const array&) {}

void CommandEncoder::set_output_array(const array&) {}

void CommandEncoder::commit() {}

void CommandEncoder::add_child_graph_node(hipGraph_t, const std::string&) {
  unreachable("CommandEncoder::add_child_graph_node");
}

} // namespace rocm

HipStream::HipStream(rocm::Device& device) {
  device.make_current();
  check_hip_error(
      "hipStreamCreateWithFlags",
      hipStreamCreateWithFlags(&handle_, hipStreamNonBlocking));
}

} // namespace mlx::core
