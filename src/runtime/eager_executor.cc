#include "runtime/eager_executor.h"

#include <chrono>
#include <unordered_map>

#include "ir/shape_inference.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/widen.h"

namespace kiln {

namespace {

class AllocatorWorkspace final : public Workspace {
 public:
  explicit AllocatorWorkspace(CachingAllocator& alloc) : alloc_(alloc) {}
  ~AllocatorWorkspace() override {
    for (void* p : blocks_) alloc_.release(p);
  }
  void* scratch(size_t bytes) override {
    void* p = alloc_.allocate_bytes(bytes);
    if (p) blocks_.push_back(p);
    return p;
  }

 private:
  CachingAllocator& alloc_;
  std::vector<void*> blocks_;
};

}  // namespace

EagerExecutor::EagerExecutor(const Graph& graph, KernelSet kernels)
    : graph_(graph), kernels_(kernels), allocator_(CachingAllocator::create()),
      cpu_(std::make_unique<CpuContext>()) {
  // Slot per value; a value's slot is cleared after the last node that reads
  // it, unless it is a graph output.
  std::unordered_map<const Value*, size_t> last_use;
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* in : nodes[i]->inputs)
      if (in) last_use[in] = i;
  free_after_.resize(nodes.size());
  for (const auto& [v, i] : last_use)
    if (!v->is_output && !v->constant) free_after_[i].push_back(v->id);
  // Outputs nobody reads are freed right after they are produced.
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* out : nodes[i]->outputs)
      if (out && out->users.empty() && !out->is_output) free_after_[i].push_back(out->id);
}

EagerExecutor::~EagerExecutor() = default;

Status EagerExecutor::check_inputs(const NamedTensors& inputs,
                                   const std::map<std::string, std::string>& sources) const {
  auto label = [&](const std::string& name) {
    auto it = sources.find(name);
    return it == sources.end() ? fmt::format("input '{}'", name)
                               : fmt::format("input '{}' ({})", name, it->second);
  };
  std::map<std::string, int64_t> symbols;
  for (const Value* v : graph_.inputs()) {
    const Tensor* given = nullptr;
    for (const auto& [name, t] : inputs)
      if (name == v->name) {
        if (given) return invalid_argument("input '{}' is given twice", name);
        given = &t;
      }
    if (!given) return invalid_argument("input '{}' is missing", v->name);
    if (given->dtype() != v->dtype)
      return invalid_argument("{} must be {}, got {}", label(v->name), dtype_name(v->dtype),
                              dtype_name(given->dtype()));
    if (!v->shape) continue;
    const SymShape& want = *v->shape;
    const Shape& got = given->shape();
    bool ok = want.size() == got.size();
    for (size_t i = 0; ok && i < want.size(); ++i) {
      if (want[i].known()) {
        ok = want[i].value == got[i];
      } else if (!want[i].symbol.empty()) {
        auto [it, fresh] = symbols.emplace(want[i].symbol, got[i]);
        if (!fresh && it->second != got[i])
          return invalid_argument("{}: dim '{}' is {} here but {} in another input",
                                  label(v->name), want[i].symbol, got[i], it->second);
      }
    }
    if (!ok)
      return invalid_argument("{} must have shape {}, got {}", label(v->name),
                              sym_shape_to_string(want), shape_to_string(got));
  }
  for (const auto& [name, t] : inputs) {
    const Value* v = graph_.find_value(name);
    if (!v || !v->is_input) return invalid_argument("the model has no input named '{}'", name);
  }
  return ok_status();
}

Status EagerExecutor::run_node(const Node& node, std::vector<Tensor>& slots) {
  InferContext infer(node);
  infer.inputs.resize(node.inputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (!node.inputs[i]) continue;
    const Tensor& t = slots[node.inputs[i]->id];
    infer.inputs[i] = TypeInfo{true, t.dtype(), sym_shape_from(t.shape()), t};
  }
  infer.outputs.resize(node.outputs.size());
  KILN_RETURN_IF_ERROR(infer_node(infer));

  KernelContext kc;
  kc.node = &node;
  kc.cpu = kernels_ == KernelSet::kCpu ? cpu_.get() : nullptr;
  AllocatorWorkspace workspace(*allocator_);
  kc.workspace = &workspace;
  std::vector<Tensor> transient(node.inputs.size());  // this call's widened weights (no reallocation below)
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (!is_stored_weight(node, i)) {
      kc.inputs.push_back(node.inputs[i] ? &slots[node.inputs[i]->id].view() : nullptr);
      continue;
    }
    // A constant widened once while the kept copies fit widened_limit_;
    // past that, and for anything else, widened for this call alone.
    const Value* v = node.inputs[i];
    if (auto it = widened_.find(v->id); it != widened_.end() && v->constant) {
      kc.inputs.push_back(&it->second.view());
      continue;
    }
    auto wide = widened_to_f32(slots[v->id].view());
    if (!wide.ok()) return wide.status().with_context(node_label(node));
    const size_t bytes = wide->nbytes();
    if (v->constant && widened_bytes_ + bytes <= widened_limit_) {
      widened_bytes_ += bytes;
      kc.inputs.push_back(&widened_.insert_or_assign(v->id, std::move(*wide)).first->second.view());
    } else {
      transient[i] = std::move(*wide);
      kc.inputs.push_back(&transient[i].view());
    }
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!node.outputs[i]) {
      kc.outputs.push_back(nullptr);
      continue;
    }
    const TypeInfo& info = infer.outputs[i];
    auto shape = info.shape ? sym_shape_concrete(*info.shape) : std::nullopt;
    if (!shape)
      return internal_error("{}: output {} has no concrete shape", node_label(node), i);
    Tensor& out = slots[node.outputs[i]->id];
    const Tensor& in0 = node.inputs.empty() || !node.inputs[0] ? Tensor() : slots[node.inputs[0]->id];
    if (i == 0 && op_is_view(node.op) && in0.dtype() == info.dtype &&
        shape_numel(*shape) == in0.numel()) {
      out = in0.reshaped(*shape);  // a view: same bytes, new shape, no copy
    } else {
      auto t = allocator_->allocate(info.dtype, *shape);
      if (!t.ok()) return t.status().with_context(node_label(node));
      out = std::move(t).value();
    }
    kc.outputs.push_back(&out.mutable_view());
  }
  KernelFn fn = kernels_ == KernelSet::kCpu ? cpu_kernel(node.op) : ref_kernel(node.op);
  return fn(kc);
}

Result<std::vector<Tensor>> EagerExecutor::run(const NamedTensors& inputs) {
  KILN_RETURN_IF_ERROR(check_inputs(inputs));
  allocator_->reset_peak();
  std::vector<Tensor> slots(graph_.values().size());
  for (const auto& [name, t] : inputs) slots[graph_.find_value(name)->id] = t;
  for (const auto& v : graph_.values())
    if (v->constant) slots[v->id] = *v->constant;
  const auto& nodes = graph_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (op_timing_) {
      auto start = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(run_node(*nodes[i], slots));
      OpTime& t = op_times_[size_t(nodes[i]->op)];
      t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++t.calls;
    } else {
      KILN_RETURN_IF_ERROR(run_node(*nodes[i], slots));
    }
    for (size_t slot : free_after_[i]) slots[slot] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (const Value* v : graph_.outputs()) outputs.push_back(slots[v->id]);
  return outputs;
}

}  // namespace kiln
