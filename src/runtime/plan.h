// The compiled plan: a model fixed to one input signature, optimized, and
// laid out as a flat list of steps over one arena.
//
// compile() specializes the graph's dims, runs the pass pipeline, plans every
// intermediate (and every kernel's scratch) into one arena, and prepares each
// step's kernel once (constant weights packed, oneDNN primitives built).
// run() then walks the steps: no heap allocation, no shape inference, no
// kernel lookup, no copies.
//
// Inputs are bound by pointer and read in place. Outputs are written into
// caller buffers when bound, else into the arena and returned as views valid
// until the next run. A caller may bind one run's output buffer as the next
// run's input (the latent across denoise steps) when the plan reads that
// input no later than it writes the output (checked; an error otherwise).
// A plan runs one call at a time.
//
//   KILN_ASSIGN_OR_RETURN(auto plan, Plan::compile(std::move(graph), {.dims = {{"batch", 2}}}));
//   KILN_RETURN_IF_ERROR(plan->bind_input("x", x.view()));
//   KILN_RETURN_IF_ERROR(plan->run());
//   const TensorView& y = plan->output(0);
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

struct PlanOptions {
  std::map<std::string, int64_t> dims;  // a size for every symbolic input dim
  PassOptions passes;
  // Inputs that a run_repeated loop carries from one iteration to the next
  // (bound over the outputs that update them: a denoise loop's latents and
  // step counter). Steps that read none of them, directly or through other
  // steps, compute the same values every iteration (a UNet's cross-attention
  // keys and values of the prompt): run_repeated runs them once per call and
  // keeps their outputs in the arena. Empty: every step runs every iteration.
  std::set<std::string> loop_carried;
  // Keep every constant in the plan's graph (a .kplan writer needs them);
  // otherwise a constant that every reader has packed into its own copy is
  // freed as soon as the last one has, so weights are not held twice.
  bool keep_constants = false;
};

// Figures from compile time (what `kiln bench` reports).
struct PlanStats {
  PassStats passes;              // rewrites per pass ("fuse_layer_norm" -> 5, ...)
  size_t arena_bytes = 0;        // the one arena: intermediates + kernel scratch
  size_t naive_bytes = 0;        // one buffer per intermediate, never reused
  size_t lower_bound_bytes = 0;  // most bytes live at any one step
  size_t packed_weight_bytes = 0;  // constant weights re-laid out for the kernels
  int64_t steps = 0;             // kernel calls per run (view ops cost none)
  int64_t loop_invariant_steps = 0;  // of which run_repeated runs once per call (PlanOptions::loop_carried)
  int64_t nodes = 0;             // nodes after the passes
  int64_t flops = 0;             // per run: matmul, convolution and attention multiply-adds x 2
  double compile_ms = 0;
};

// "x:f32[2,4,32,32] t:i64[2]": what selects a compiled plan; one entry per input.
std::string signature_entry(std::string_view name, DType dtype, const Shape& shape);

// The sizes of the graph's symbolic input dims that `inputs` (name, shape)
// imply; an error when an input's rank differs or a dim takes two sizes.
Result<std::map<std::string, int64_t>> input_dims(
    const Graph& graph, const std::vector<std::pair<std::string, Shape>>& inputs);

// Where one run's time went, step by step (Plan::run with a profile).
struct StepProfile {
  const Node* node = nullptr;
  double start_ms = 0;  // since the run began
  double ms = 0;
  int64_t heap_allocations = -1;  // -1: the program has no allocation counter
};
struct RunProfile {
  std::vector<StepProfile> steps;
};

class Plan {
 public:
  static Result<std::unique_ptr<Plan>> compile(Graph graph, const PlanOptions& options);
  ~Plan();

  const Graph& graph() const { return graph_; }
  // False when compiling freed constants it packed (PlanOptions::keep_constants).
  bool graph_whole() const { return graph_whole_; }
  const PlanStats& stats() const { return stats_; }
  // The rewrites the passes made, when they ran before this plan was
  // compiled (a plan loaded from a .kplan file).
  void set_pass_counts(std::map<std::string, int64_t> counts) { stats_.passes.counts = std::move(counts); }

  // The graph inputs/outputs with their concrete shapes, in graph order.
  const std::vector<const Value*>& inputs() const { return inputs_; }
  const std::vector<const Value*>& outputs() const { return outputs_; }
  std::string signature() const;

  // Points input `name` at caller memory, read in place by every run until
  // bound again; dtype and shape must match the signature.
  Status bind_input(std::string_view name, const TensorView& view);
  // Has output `name` written straight into caller memory (same checks).
  Status bind_output(std::string_view name, const TensorView& view);

  // Runs every step. Every input must be bound. With a profile, also times
  // each step and counts its heap allocations (costs a clock read per step).
  Status run(RunProfile* profile = nullptr);
  // Runs the plan `times` times in one call, the bindings kept: a loop whose
  // state is bound in place (outputs over the inputs they update, as a
  // compiled denoise loop binds its latents and step counter). Loop-invariant
  // steps (PlanOptions::loop_carried) run in the first iteration only.
  // `after_each` (optional) hears the iteration count after each pass, for
  // progress; an error from it (a cancel) ends the loop there and is returned.
  Status run_repeated(int64_t times, const std::function<Status(int64_t)>& after_each = {});

  // Gives the arena's memory back to the system while the plan sits idle
  // (between the stages of a pipeline): the next run maps it afresh. The
  // last run's outputs that live in the arena are lost.
  void release_arena_memory();

  // Output i of the last run: the caller's buffer when bound, else a view
  // into the arena, valid until the next run.
  const TensorView& output(size_t i) const;
  // Bytes the last run copied because an output is an input or a constant
  // of the graph (nothing in any model a pass pipeline has seen).
  size_t output_copy_bytes() const { return output_copy_bytes_; }

 private:
  struct Step;
  struct Buffer;
  class ArenaWorkspace;

  Plan();
  Status build(const PlanOptions& options);
  void mark_loop_invariant(const std::set<std::string>& loop_carried);
  Status run_steps(bool skip_invariant, RunProfile* profile);
  Status plan_arena(const std::vector<size_t>& scratch_bytes);
  Status prepare_kernels(std::vector<size_t>& scratch_bytes, bool keep_constants);
  void release_if_copied(Value& constant, const std::unordered_map<const Node*, const Step*>& step_of);
  void point_buffer(size_t buffer, void* data);
  Status check_bindings() const;
  void copy_outputs();  // outputs that are inputs or constants, into their bound buffers
  Result<size_t> io_value(std::string_view name, bool input) const;

  Graph graph_;
  PlanStats stats_;
  std::vector<const Value*> inputs_, outputs_;
  std::vector<TensorView> views_;    // per value id: shape fixed, data set by binding
  std::vector<int64_t> buffer_of_;   // per value id: its Buffer, or -1 (constant)
  std::vector<Buffer> buffers_;
  std::unique_ptr<CpuContext> cpu_;  // before steps_: their kernel states use its engine
  std::vector<Step> steps_;
  std::vector<bool> step_invariant_;  // per step: reads no loop-carried input (PlanOptions::loop_carried)
  std::unique_ptr<ArenaWorkspace> workspace_;
  std::byte* arena_ = nullptr;
  std::vector<bool> input_bound_;
  bool bindings_checked_ = false;  // check_bindings() holds for the current bindings
  bool graph_whole_ = true;
  size_t output_copy_bytes_ = 0;
  std::vector<std::pair<size_t, size_t>> output_copies_;  // (output index, source value id)
  std::vector<TensorView> bound_outputs_;                 // per output; data null when unbound
};

}  // namespace kiln
