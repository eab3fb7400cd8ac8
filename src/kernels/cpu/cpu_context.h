// What CPU kernels share across calls: the oneDNN engine and stream. Owned by
// the executor (one per executor), passed to kernels in KernelContext::cpu.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace kiln {

struct CpuContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

}  // namespace kiln
