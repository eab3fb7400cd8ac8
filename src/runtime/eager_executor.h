// The eager executor: runs a graph node by node, as PyTorch eager does.
//
// Each node's output shapes are inferred from the concrete inputs, outputs are
// allocated from a caching allocator when produced and freed after their last
// use; view ops (Reshape, Squeeze, ...) alias their input. It is the honest
// baseline the compiled runtime is measured against: same kernels, no
// artificial slowness.
//
//   EagerExecutor exec(graph);
//   KILN_ASSIGN_OR_RETURN(auto outputs, exec.run({{"x", x}}));
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"
#include "runtime/caching_allocator.h"

namespace kiln {

enum class KernelSet { kCpu, kReference };

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class EagerExecutor {
 public:
  explicit EagerExecutor(const Graph& graph, KernelSet kernels = KernelSet::kCpu);
  ~EagerExecutor();

  // Runs the graph. Every graph input must be given once, with its declared
  // dtype and a shape matching its declared dims (a symbolic dim takes one
  // value across all inputs). Returns the outputs in graph output order.
  Result<std::vector<Tensor>> run(const NamedTensors& inputs);

  // The checks run() starts with. `sources` (input name -> where it came
  // from, e.g. a file) is added to messages about that input.
  Status check_inputs(const NamedTensors& inputs,
                      const std::map<std::string, std::string>& sources = {}) const;

  const AllocatorStats& allocator_stats() const { return allocator_->stats(); }

  // Per-op-kind time (infer + allocate + kernel), summed over runs while on.
  struct OpTime {
    double seconds = 0;
    int64_t calls = 0;
  };
  void set_op_timing(bool on) { op_timing_ = on; }
  // Stored weights kept widened to f32 between runs: their bytes, and the
  // most kept (2 GiB unless set; the rest are widened at each call).
  size_t widened_kept_bytes() const { return widened_bytes_; }
  void set_widened_kept_limit(size_t bytes) { widened_limit_ = bytes; }
  const std::vector<OpTime>& op_times() const { return op_times_; }

 private:
  Status run_node(const Node& node, std::vector<Tensor>& slots);

  const Graph& graph_;
  KernelSet kernels_;
  std::shared_ptr<CachingAllocator> allocator_;
  std::unique_ptr<CpuContext> cpu_;
  bool op_timing_ = false;
  std::vector<OpTime> op_times_ = std::vector<OpTime>(kOpCount);
  std::vector<std::vector<size_t>> free_after_; // per node: value ids whose last use it is
  // Stored weights (kernel.h) kept widened to f32, by value id, up to
  // widened_limit_ bytes: all of a full-size model's would not fit (UMT5-XXL's
  // 11 GB of bf16 are 23 GB in f32), and past the limit a weight is widened
  // again at each call instead.
  std::unordered_map<size_t, Tensor> widened_;
  size_t widened_bytes_ = 0, widened_limit_ = size_t(2) << 30;
};

}  // namespace kiln
