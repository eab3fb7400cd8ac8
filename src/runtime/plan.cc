#include "runtime/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/heap_probe.h"
#include "core/huge_pages.h"
#include "core/mapped_file.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/widen.h"
#include "memory/memory_plan.h"
#include "runtime/profile.h"

namespace kiln {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Scratch handed out from heap blocks while a step's first call runs, to
// learn how much scratch each step needs before the arena is laid out.
class MeasuringWorkspace final : public Workspace {
 public:
  ~MeasuringWorkspace() override { reset(); }
  void* scratch(size_t bytes) override {
    bytes = round_up(std::max<size_t>(bytes, 1), kArenaAlignment);
    void* p = std::aligned_alloc(kArenaAlignment, bytes);
    if (!p) return nullptr;
    blocks_.push_back(p);
    used_ += bytes;
    return p;
  }
  // Frees this step's blocks; returns the bytes they took.
  size_t reset() {
    for (void* p : blocks_) std::free(p);
    blocks_.clear();
    return std::exchange(used_, 0);
  }

 private:
  std::vector<void*> blocks_;
  size_t used_ = 0;
};

}  // namespace

// A step's scratch: a slice of the arena, handed out front to back.
class Plan::ArenaWorkspace final : public Workspace {
 public:
  void reset(std::byte* base, size_t capacity) {
    base_ = base;
    capacity_ = capacity;
    used_ = 0;
  }
  void* scratch(size_t bytes) override {
    bytes = round_up(std::max<size_t>(bytes, 1), kArenaAlignment);
    if (bytes > capacity_ - used_) return nullptr;
    void* p = base_ + used_;
    used_ += bytes;
    return p;
  }

 private:
  std::byte* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

// Memory one or more values live in: an intermediate in the arena (or in a
// caller buffer once bound as an output), or a graph input. View ops add
// values to their input's buffer instead of making one.
struct Plan::Buffer {
  enum class Kind { kArena, kInput } kind = Kind::kArena;
  size_t bytes = 0;
  int64_t first_step = 0, last_step = 0;  // node indices: writer, last reader
  size_t offset = 0;                      // in the arena
  std::vector<size_t> values;             // value ids stored in it
  void* caller = nullptr;                 // the caller buffer an output is bound to
  int64_t caller_output = -1;             // which output bound it (it may bind again elsewhere)
  bool loop_invariant = false;            // written once per run_repeated call, read by every iteration
};

struct Plan::Step {
  KernelFn fn = nullptr;
  KernelContext ctx;
  std::unique_ptr<KernelState> state;
  int64_t node_index = 0;
  size_t scratch_offset = 0, scratch_bytes = 0;
  // Stored weights (kernel.h) widened to f32: (input index, the f32 copy
  // the kernel reads on every run; or, once it has packed its own, an f32
  // tensor without data, which its replays never read).
  std::vector<std::pair<size_t, std::unique_ptr<Tensor>>> widened;

  // Whether the step keeps its own copy of input i, never reading the input again.
  bool owns_copy_of(size_t i) const {
    if (state && state->copies_input(i)) return true;
    for (const auto& w : widened)
      if (w.first == i) return true;
    return false;
  }
};

Plan::Plan() : workspace_(std::make_unique<ArenaWorkspace>()) {}

Plan::~Plan() { std::free(arena_); }

std::string signature_entry(std::string_view name, DType dtype, const Shape& shape) {
  return fmt::format("{}:{}{}", name, dtype_name(dtype), shape_to_string(shape));
}

std::string Plan::signature() const {
  std::string s;
  for (const Value* v : inputs_) {
    if (!s.empty()) s += ' ';
    s += signature_entry(v->name, v->dtype, views_[v->id].shape);
  }
  return s;
}

Result<std::map<std::string, int64_t>> input_dims(
    const Graph& graph, const std::vector<std::pair<std::string, Shape>>& inputs) {
  std::map<std::string, int64_t> dims;
  for (const auto& [name, shape] : inputs) {
    const Value* v = graph.find_value(name);
    if (!v || !v->is_input) return invalid_argument("the model has no input named '{}'", name);
    if (!v->shape) continue;
    if (v->shape->size() != shape.size())
      return invalid_argument("input '{}' must have shape {}, got {}", name, sym_shape_to_string(*v->shape),
                              shape_to_string(shape));
    for (size_t d = 0; d < shape.size(); ++d) {
      const Dim& want = (*v->shape)[d];
      if (want.known() || want.symbol.empty()) continue;
      auto [it, fresh] = dims.emplace(want.symbol, shape[d]);
      if (!fresh && it->second != shape[d])
        return invalid_argument("input '{}': dim '{}' is {} here but {} in another input", name, want.symbol,
                                shape[d], it->second);
    }
  }
  return dims;
}

Result<std::unique_ptr<Plan>> Plan::compile(Graph graph, const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Plan> plan(new Plan());
  plan->graph_ = std::move(graph);
  KILN_RETURN_IF_ERROR(plan->build(options));
  plan->stats_.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

Status Plan::build(const PlanOptions& options) {
  KILN_RETURN_IF_ERROR(specialize_shapes(graph_, options.dims));
  KILN_RETURN_IF_ERROR(run_passes(graph_, options.passes, &stats_.passes));

  // Every value gets its concrete shape, fixed for the plan's life.
  const auto& values = graph_.values();
  views_.resize(values.size());
  buffer_of_.assign(values.size(), -1);
  for (const auto& v : values) {
    TensorView& view = views_[v->id];
    view.dtype = v->dtype;
    if (v->constant) {
      view = v->constant->view();
      continue;
    }
    if (v->users.empty() && !v->producer && !v->is_input) continue;
    auto shape = v->shape ? sym_shape_concrete(*v->shape) : std::nullopt;
    if (!shape)
      return unsupported("'{}' has shape {} after specialization; a plan needs static shapes", v->name,
                         v->shape ? sym_shape_to_string(*v->shape) : "unknown");
    view.shape = std::move(*shape);
  }

  auto new_buffer = [&](Value* v, Buffer::Kind kind, int64_t first_step) {
    buffer_of_[v->id] = int64_t(buffers_.size());
    buffers_.push_back(Buffer{kind, views_[v->id].nbytes(), first_step, first_step, 0, {v->id}});
  };
  for (Value* in : graph_.inputs()) {
    inputs_.push_back(in);
    new_buffer(in, Buffer::Kind::kInput, 0);
  }
  input_bound_.assign(inputs_.size(), false);

  // One step per node, except view ops, which only add a value to their
  // input's buffer.
  const auto& nodes = graph_.nodes();
  std::vector<int64_t> step_nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = *nodes[i];
    const Value* in0 = node.inputs.empty() ? nullptr : node.inputs[0];
    Value* out0 = node.outputs.empty() ? nullptr : node.outputs[0];
    if (op_is_view(node.op) && in0 && out0 && buffer_of_[in0->id] >= 0 && in0->dtype == out0->dtype &&
        views_[in0->id].numel() == views_[out0->id].numel()) {
      buffer_of_[out0->id] = buffer_of_[in0->id];
      buffers_[size_t(buffer_of_[in0->id])].values.push_back(out0->id);
      continue;
    }
    step_nodes.push_back(int64_t(i));
    for (Value* out : node.outputs) {
      if (!out) continue;
      const TensorView& view = views_[out->id];
      if (view.nbytes() > physical_memory_bytes())
        return resource_exhausted("{}: cannot allocate {} bytes for a tensor of shape {}", node_label(node),
                                  view.nbytes(), shape_to_string(view.shape));
      new_buffer(out, Buffer::Kind::kArena, int64_t(i));
    }
  }
  // Lifetimes: a buffer lives until the last node that reads any value in
  // it; graph outputs until the end (they are read after the run).
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* in : nodes[i]->inputs)
      if (in && buffer_of_[in->id] >= 0) {
        Buffer& b = buffers_[size_t(buffer_of_[in->id])];
        b.last_step = std::max(b.last_step, int64_t(i));
      }
  for (const Value* out : graph_.outputs()) {
    outputs_.push_back(out);
    if (buffer_of_[out->id] >= 0) buffers_[size_t(buffer_of_[out->id])].last_step = int64_t(nodes.size());
  }
  bound_outputs_.resize(outputs_.size());

  steps_.resize(step_nodes.size());
  cpu_ = std::make_unique<CpuContext>();
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& step = steps_[s];
    const Node& node = *nodes[size_t(step_nodes[s])];
    step.node_index = step_nodes[s];
    step.fn = cpu_kernel(node.op);
    step.ctx.node = &node;
    step.ctx.cpu = cpu_.get();
    step.ctx.workspace = workspace_.get();
    step.ctx.state = &step.state;
    for (const Value* in : node.inputs) step.ctx.inputs.push_back(in ? &views_[in->id] : nullptr);
    for (const Value* out : node.outputs) step.ctx.outputs.push_back(out ? &views_[out->id] : nullptr);
  }
  mark_loop_invariant(options.loop_carried);
  stats_.steps = int64_t(steps_.size());
  stats_.nodes = int64_t(nodes.size());
  for (const auto& n : nodes) stats_.flops += node_flops(*n);

  std::vector<size_t> scratch_bytes(steps_.size(), 0);
  KILN_RETURN_IF_ERROR(plan_arena(scratch_bytes));
  KILN_RETURN_IF_ERROR(prepare_kernels(scratch_bytes, options.keep_constants));
  KILN_RETURN_IF_ERROR(plan_arena(scratch_bytes));
  for (const Step& step : steps_) {
    if (step.state) stats_.packed_weight_bytes += step.state->owned_bytes();
    for (const auto& w : step.widened)
      if (w.second->raw()) stats_.packed_weight_bytes += w.second->nbytes();
  }
  return ok_status();
}

// Frees `constant` when every node reading it is a step whose state keeps
// its own packed copy of it (KernelState::copies_input); a mapped one's
// pages are dropped from resident memory instead (the mapping is shared).
void Plan::release_if_copied(Value& constant, const std::unordered_map<const Node*, const Step*>& step_of) {
  if (!constant.constant || constant.is_output) return;
  for (const Node* user : constant.users) {
    const auto it = step_of.find(user);  // none for a view op: it aliases the constant
    const Step* step = it == step_of.end() ? nullptr : it->second;
    for (size_t i = 0; i < user->inputs.size(); ++i)
      if (user->inputs[i] == &constant && !(step && step->owns_copy_of(i))) return;
  }
  MappedFile::drop_resident_pages(constant.constant->view().data, constant.constant->nbytes());
  constant.constant.reset();
  graph_whole_ = false;
  views_[constant.id].data = nullptr;  // no step reads it: a bug that did would fault at once
}

// A step is loop-invariant when none of its inputs depends on a loop-carried
// input. Graph outputs are always recomputed (the caller reads them each
// iteration, and may bind them over carried inputs).
void Plan::mark_loop_invariant(const std::set<std::string>& loop_carried) {
  step_invariant_.assign(steps_.size(), false);
  if (loop_carried.empty()) return;
  std::vector<bool> varies(graph_.values().size(), false);
  for (const Value* in : inputs_) varies[in->id] = loop_carried.count(in->name) > 0;
  for (const auto& node : graph_.nodes()) {
    bool any = false;
    for (const Value* in : node->inputs) any |= in && varies[in->id];
    for (const Value* out : node->outputs)
      if (out) varies[out->id] = any || out->is_output;
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Node& node = *steps_[s].ctx.node;
    bool invariant = true;
    for (const Value* out : node.outputs) invariant &= !out || !varies[out->id];
    if (!invariant) continue;
    step_invariant_[s] = true;
    ++stats_.loop_invariant_steps;
    // Its outputs must survive every other step of every iteration.
    for (const Value* out : node.outputs)
      if (out && buffer_of_[out->id] >= 0) buffers_[size_t(buffer_of_[out->id])].loop_invariant = true;
  }
}

// Lays out every arena buffer and each step's scratch in one arena, and
// points the values at their place in it.
Status Plan::plan_arena(const std::vector<size_t>& scratch_bytes) {
  std::vector<BufferLifetime> lifetimes;
  std::vector<size_t> arena_buffers;
  const int64_t end = int64_t(graph_.nodes().size());
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (buffers_[b].kind == Buffer::Kind::kArena) {
      arena_buffers.push_back(b);
      const Buffer& buf = buffers_[b];
      if (buf.loop_invariant) lifetimes.push_back({0, end, buf.bytes});
      else lifetimes.push_back({buf.first_step, buf.last_step, buf.bytes});
    }
  for (size_t s = 0; s < steps_.size(); ++s)
    lifetimes.push_back({steps_[s].node_index, steps_[s].node_index, scratch_bytes[s]});
  const MemoryPlan mp = memory_plan_greedy_by_size(lifetimes);
  KILN_RETURN_IF_ERROR(memory_plan_check(lifetimes, mp));
  if (mp.arena_bytes > physical_memory_bytes())
    return resource_exhausted("the plan needs a {} byte arena, more than this machine's memory",
                              mp.arena_bytes);
  std::free(arena_);
  arena_ = static_cast<std::byte*>(allocate_huge(round_up(mp.arena_bytes + 1, kArenaAlignment)));
  if (!arena_) return resource_exhausted("cannot allocate a {} byte arena", mp.arena_bytes);
  stats_.arena_bytes = mp.arena_bytes;
  stats_.naive_bytes = mp.naive_bytes;
  stats_.lower_bound_bytes = mp.lower_bound_bytes;
  for (size_t i = 0; i < arena_buffers.size(); ++i) {
    Buffer& b = buffers_[arena_buffers[i]];
    b.offset = mp.offsets[i];
    point_buffer(arena_buffers[i], b.caller ? b.caller : arena_ + b.offset);
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    steps_[s].scratch_offset = mp.offsets[arena_buffers.size() + s];
    steps_[s].scratch_bytes = scratch_bytes[s];
  }
  return ok_status();
}

void Plan::point_buffer(size_t buffer, void* data) {
  for (size_t v : buffers_[buffer].values) views_[v].data = data;
}

// Runs every step once over zero inputs: each kernel builds its state (packed
// weights, convolution sizes, oneDNN primitives) and reports the scratch it
// takes.
Status Plan::prepare_kernels(std::vector<size_t>& scratch_bytes, bool keep_constants) {
  std::vector<void*> zeros;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const size_t bytes = views_[inputs_[i]->id].nbytes();
    void* p = std::calloc(1, std::max<size_t>(bytes, 1));
    if (!p) {
      for (void* z : zeros) std::free(z);
      return resource_exhausted("cannot allocate {} bytes for input '{}'", bytes, inputs_[i]->name);
    }
    zeros.push_back(p);
    point_buffer(size_t(buffer_of_[inputs_[i]->id]), p);
  }
  std::unordered_map<const Node*, const Step*> step_of;
  std::vector<size_t> last_reader(graph_.values().size(), 0);  // per value id: the last step reading it
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Node* node = graph_.nodes()[size_t(steps_[s].node_index)].get();
    step_of[node] = &steps_[s];
    for (const Value* v : node->inputs)
      if (v) last_reader[v->id] = s;
  }
  MeasuringWorkspace measuring;
  Status status;
  for (size_t s = 0; s < steps_.size() && status.ok(); ++s) {
    Step& step = steps_[s];
    const Node& node = *step.ctx.node;
    // Stored weights: the kernel's first call reads them widened; the wide
    // copy lives on only where the kernel packed none of its own.
    std::vector<std::pair<size_t, std::unique_ptr<Tensor>>>& wide = step.widened;
    for (size_t i = 0; i < node.inputs.size() && status.ok(); ++i) {
      if (!is_stored_weight(node, i)) continue;
      if (!node.inputs[i]->constant) {
        status = unsupported("{}: its weight '{}' is {}, which a plan widens only for a constant", node_label(node),
                             node.inputs[i]->name, dtype_name(node.inputs[i]->dtype));
        break;
      }
      auto t = widened_to_f32(*step.ctx.inputs[i]);
      if (!t.ok()) {
        status = t.status().with_context(node_label(node));
        break;
      }
      wide.emplace_back(i, std::make_unique<Tensor>(std::move(*t)));
      step.ctx.inputs[i] = &wide.back().second->view();
    }
    if (!status.ok()) break;
    step.ctx.workspace = &measuring;
    status = step.fn(step.ctx);
    step.ctx.workspace = workspace_.get();
    for (auto& [i, t] : wide)
      if (step.state && step.state->copies_input(i)) *t = Tensor(DType::kF32, t->shape(), nullptr, nullptr);
    scratch_bytes[s] = measuring.reset();
    // Constants whose last reader this step is, all of whose readers packed
    // them: not needed beside the packed copies.
    if (!keep_constants && status.ok())
      for (Value* v : graph_.nodes()[size_t(step.node_index)]->inputs)
        if (v && v->constant && last_reader[v->id] == s) release_if_copied(*v, step_of);
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    point_buffer(size_t(buffer_of_[inputs_[i]->id]), nullptr);
    std::free(zeros[i]);
  }
  return status;
}

void Plan::release_arena_memory() {
  if (arena_) release_pages(arena_, stats_.arena_bytes);
}

Result<size_t> Plan::io_value(std::string_view name, bool input) const {
  const auto& list = input ? inputs_ : outputs_;
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i]->name == name) return i;
  return invalid_argument("the model has no {} named '{}'", input ? "input" : "output", name);
}

namespace {
Status check_view(const TensorView& want, const TensorView& got, std::string_view what, std::string_view name) {
  if (got.dtype != want.dtype)
    return invalid_argument("{} '{}' must be {}, got {}", what, name, dtype_name(want.dtype), dtype_name(got.dtype));
  if (got.shape != want.shape)
    return invalid_argument("{} '{}' must have shape {} (the plan's signature), got {}", what, name,
                            shape_to_string(want.shape), shape_to_string(got.shape));
  if (!got.data && got.nbytes()) return invalid_argument("{} '{}' has no data", what, name);
  return ok_status();
}
}  // namespace

Status Plan::bind_input(std::string_view name, const TensorView& view) {
  KILN_ASSIGN_OR_RETURN(size_t i, io_value(name, true));
  const size_t id = inputs_[i]->id;
  KILN_RETURN_IF_ERROR(check_view(views_[id], view, "input", name));
  point_buffer(size_t(buffer_of_[id]), view.data);
  input_bound_[i] = true;
  bindings_checked_ = false;
  return ok_status();
}

Status Plan::bind_output(std::string_view name, const TensorView& view) {
  KILN_ASSIGN_OR_RETURN(size_t i, io_value(name, false));
  const size_t id = outputs_[i]->id;
  KILN_RETURN_IF_ERROR(check_view(views_[id], view, "output", name));
  bound_outputs_[i] = view;
  const int64_t b = buffer_of_[id];
  // An output computed into its own arena buffer is written straight into
  // the caller's memory; one that is a graph input or constant (or shares a
  // buffer already bound elsewhere) is copied there after the run.
  std::erase_if(output_copies_, [&](const auto& c) { return c.first == i; });
  bindings_checked_ = false;
  if (b >= 0 && buffers_[size_t(b)].kind == Buffer::Kind::kArena &&
      (buffers_[size_t(b)].caller_output < 0 || buffers_[size_t(b)].caller_output == int64_t(i))) {
    buffers_[size_t(b)].caller = view.data;
    buffers_[size_t(b)].caller_output = int64_t(i);
    point_buffer(size_t(b), view.data);
  } else {
    output_copies_.push_back({i, id});
  }
  return ok_status();
}

const TensorView& Plan::output(size_t i) const {
  return bound_outputs_[i].data ? bound_outputs_[i] : views_[outputs_[i]->id];
}

namespace {

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Ops that read element i of a same-shaped input before writing element i
// of the output, so the two may share memory.
bool elementwise_in_place(OpKind op) {
  switch (op) {
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kDiv: case OpKind::kNeg:
    case OpKind::kSigmoid: case OpKind::kTanh: case OpKind::kRelu: case OpKind::kGelu: case OpKind::kSilu:
    case OpKind::kDenoiseStep: case OpKind::kUniPcStep:
      return true;
    default:
      return false;
  }
}

}  // namespace

// Inputs may share memory with an output bound to caller memory (a latent
// fed back across denoise steps) only when nothing reads the input after the
// output's first write; and never point into the arena, which the run
// overwrites.
Status Plan::check_bindings() const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorView& in = views_[inputs_[i]->id];
    if (overlap(in.data, in.nbytes(), arena_, stats_.arena_bytes))
      return invalid_argument("input '{}' points into the plan's arena (an output view of an earlier run), which "
                              "this run overwrites: bind that output to your own buffer and pass that",
                              inputs_[i]->name);
    const Buffer& input = buffers_[size_t(buffer_of_[inputs_[i]->id])];
    for (const Buffer& out : buffers_) {
      if (!out.caller || !overlap(in.data, in.nbytes(), out.caller, out.bytes)) continue;
      const Node& writer = *graph_.nodes()[size_t(out.first_step)];
      bool in_place = out.first_step == input.last_step && elementwise_in_place(writer.op);
      for (const Value* v : writer.inputs)
        in_place &= !v || buffer_of_[v->id] != buffer_of_[inputs_[i]->id] || views_[v->id].shape == views_[out.values[0]].shape;
      if (out.first_step < input.last_step || (out.first_step == input.last_step && !in_place)) {
        const size_t reader = size_t(input.last_step);
        return invalid_argument("output '{}' shares memory with input '{}', which {} still reads after {} writes the "
                                "output: bind the output to another buffer",
                                graph_.values()[out.values[0]]->name, inputs_[i]->name,
                                reader < graph_.nodes().size() ? node_label(*graph_.nodes()[reader]) : "the caller",
                                node_label(writer));
      }
    }
  }
  return ok_status();
}

Status Plan::run(RunProfile* profile) { return run_steps(false, profile); }

Status Plan::run_steps(bool skip_invariant, RunProfile* profile) {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!input_bound_[i]) return invalid_argument("input '{}' is not bound", inputs_[i]->name);
  if (!bindings_checked_) {
    KILN_RETURN_IF_ERROR(check_bindings());
    bindings_checked_ = true;
  }
  if (profile) {
    profile->steps.resize(steps_.size());
    const HeapAllocationCount heap = heap_allocation_count();
    const auto run_start = std::chrono::steady_clock::now();
    auto ms = [](auto from, auto to) { return std::chrono::duration<double, std::milli>(to - from).count(); };
    for (size_t s = 0; s < steps_.size(); ++s) {
      Step& step = steps_[s];
      if (skip_invariant && step_invariant_[s]) continue;
      workspace_->reset(arena_ + step.scratch_offset, step.scratch_bytes);
      const int64_t allocations = heap ? heap() : 0;
      const auto start = std::chrono::steady_clock::now();
      Status status = step.fn(step.ctx);
      const auto end = std::chrono::steady_clock::now();
      if (!status.ok()) return status;
      profile->steps[s] = {step.ctx.node, ms(run_start, start), ms(start, end), heap ? heap() - allocations : -1};
    }
  } else {
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (skip_invariant && step_invariant_[s]) continue;
      Step& step = steps_[s];
      workspace_->reset(arena_ + step.scratch_offset, step.scratch_bytes);
      Status status = step.fn(step.ctx);
      if (!status.ok()) return status;
    }
  }
  copy_outputs();
  return ok_status();
}

Status Plan::run_repeated(int64_t times, const std::function<Status(int64_t)>& after_each) {
  for (int64_t i = 0; i < times; ++i) {
    KILN_RETURN_IF_ERROR(run_steps(/*skip_invariant=*/i > 0, nullptr));
    if (after_each) KILN_RETURN_IF_ERROR(after_each(i + 1));
  }
  return ok_status();
}

void Plan::copy_outputs() {
  output_copy_bytes_ = 0;
  for (const auto& [i, id] : output_copies_) {
    std::memcpy(bound_outputs_[i].data, views_[id].data, views_[id].nbytes());
    output_copy_bytes_ += views_[id].nbytes();
  }
}

}  // namespace kiln
