#include "op_test_util.h"

#include <cmath>
#include <cstring>
#include <random>

#include "heap_counter/heap_counter.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"
#include "runtime/profile.h"

namespace kiln::testing {

namespace {

Tensor make_input(const InputSpec& spec, std::mt19937_64& rng) {
  auto t = Tensor::empty(spec.dtype, spec.shape);
  EXPECT_TRUE(t.ok()) << t.status().message();
  Tensor out = std::move(t).value();
  std::uniform_real_distribution<double> dist(spec.lo, spec.hi);
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v = spec.values ? (*spec.values)[size_t(i) % spec.values->size()] : dist(rng);
    if (spec.grid > 0) v = std::round(v / spec.grid) * spec.grid;
    dtype_visit(spec.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, f16>) out.data<f16>()[i] = f32_to_f16(float(v));
      else if constexpr (std::is_same_v<T, bf16>) out.data<bf16>()[i] = f32_to_bf16(float(v));
      else if constexpr (std::is_same_v<T, bool>) out.data<bool>()[i] = spec.values ? v != 0 : v > 0;
      else if constexpr (std::is_integral_v<T>) out.data<T>()[i] = T(spec.values ? v : std::floor(v));
      else out.data<T>()[i] = T(v);
    });
  }
  return out;
}

struct Built {
  Graph graph;
  NamedTensors inputs;
};

// The one-node graph of `c`. With `constants`, every input after the first
// is a constant (a weight, as a compiled plan sees one); the values are the
// same either way.
Built build(const OpCase& c, bool constants = false) {
  Built b;
  std::mt19937_64 rng(1234);
  std::vector<Value*> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].absent) {
      ins.push_back(nullptr);
      continue;
    }
    std::string name = "in" + std::to_string(i);
    Tensor t = make_input(c.inputs[i], rng);
    if (constants && i > 0) {
      ins.push_back(b.graph.add_constant(name, std::move(t)));
      continue;
    }
    ins.push_back(b.graph.add_input(name, c.inputs[i].dtype, sym_shape_from(c.inputs[i].shape)));
    b.inputs.emplace_back(name, std::move(t));
  }
  std::vector<Value*> outs;
  for (int i = 0; i < c.num_outputs; ++i) outs.push_back(b.graph.add_value("out" + std::to_string(i)));
  b.graph.add_node(c.op, c.label, ins, outs, c.attrs);
  for (Value* v : outs) b.graph.mark_output(v);
  b.graph.opset = 18;
  return b;
}

Result<std::vector<Tensor>> run(Built& b, KernelSet set) {
  EagerExecutor exec(b.graph, set);
  return exec.run(b.inputs);
}

}  // namespace

std::vector<Tensor> run_reference(const OpCase& c) {
  Built b = build(c);
  auto out = run(b, KernelSet::kReference);
  EXPECT_TRUE(out.ok()) << c.label << ": " << out.status().message();
  return out.ok() ? std::move(out).value() : std::vector<Tensor>{};
}



namespace {

// The outputs of `b` compiled into a plan and run `runs` times (the first
// run records each step's state, later ones replay it); those of the last
// run, which `profile` (if given) profiles.
Result<std::vector<Tensor>> run_plan(Built& b, int runs, RunProfile* profile = nullptr) {
  std::vector<std::pair<std::string, Shape>> signature;
  for (const auto& [name, t] : b.inputs) signature.emplace_back(name, t.shape());
  KILN_ASSIGN_OR_RETURN(auto dims, input_dims(b.graph, signature));
  KILN_ASSIGN_OR_RETURN(auto plan, Plan::compile(std::move(b.graph), {.dims = dims}));
  for (const auto& [name, t] : b.inputs) KILN_RETURN_IF_ERROR(plan->bind_input(name, t.view()));
  for (int r = 0; r < runs; ++r) KILN_RETURN_IF_ERROR(plan->run(r + 1 == runs ? profile : nullptr));
  std::vector<Tensor> out;
  for (size_t i = 0; i < plan->outputs().size(); ++i) {
    const TensorView& v = plan->output(i);
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(v.dtype, v.shape));
    std::memcpy(t.data<void>(), v.data, v.nbytes());
    out.push_back(std::move(t));
  }
  return out;
}

bool expect_close(const OpCase& c, const std::vector<Tensor>& ref, const std::vector<Tensor>& cpu);

}  // namespace

std::vector<Tensor> run_cpu(const OpCase& c, bool in_plan) {
  Built b = build(c, in_plan);
  auto out = in_plan ? run_plan(b, 3) : run(b, KernelSet::kCpu);
  EXPECT_TRUE(out.ok()) << c.label << ": " << out.status().message();
  return out.ok() ? std::move(out).value() : std::vector<Tensor>{};
}

int64_t replay_allocations(const OpCase& c) {
  if (!HeapCounter::available()) return -1;
  Built b = build(c, true);
  RunProfile profile;
  auto out = run_plan(b, 2, &profile);  // records, then replays once
  EXPECT_TRUE(out.ok()) << c.label << ": " << out.status().message();
  int64_t allocations = 0;
  for (const StepProfile& step : profile.steps) allocations += step.heap_allocations;
  return out.ok() ? allocations : -1;
}

bool check_op(const OpCase& c) {
  SCOPED_TRACE(c.label);
  Built b = build(c);
  auto ref = run(b, KernelSet::kReference);
  auto cpu = run(b, KernelSet::kCpu);
  EXPECT_TRUE(ref.ok()) << "reference: " << ref.status().message();
  EXPECT_TRUE(cpu.ok()) << "cpu: " << cpu.status().message();
  if (!ref.ok() || !cpu.ok()) return false;
  return expect_close(c, *ref, *cpu);
}

bool check_op_in_plan(const OpCase& c) {
  SCOPED_TRACE(c.label + " (in a plan, inputs after the first constant)");
  Built b = build(c);
  auto ref = run(b, KernelSet::kReference);
  Built with_constants = build(c, true);
  auto plan = run_plan(with_constants, 3);
  EXPECT_TRUE(ref.ok()) << "reference: " << ref.status().message();
  EXPECT_TRUE(plan.ok()) << "plan: " << plan.status().message();
  return ref.ok() && plan.ok() && expect_close(c, *ref, *plan);
}

namespace {

bool expect_close(const OpCase& c, const std::vector<Tensor>& ref, const std::vector<Tensor>& cpu) {
  for (size_t k = 0; k < ref.size(); ++k) {
    const Tensor& r = ref[k];
    const Tensor& g = cpu[k];
    EXPECT_EQ(r.dtype(), g.dtype()) << "output " << k;
    EXPECT_EQ(r.shape(), g.shape()) << "output " << k;
    if (r.dtype() != g.dtype() || r.shape() != g.shape()) return false;
    double max_ref = 0, max_err = 0;
    int64_t worst = -1;
    for (int64_t i = 0; i < r.numel(); ++i) {
      double rv = r.element_as_double(i), gv = g.element_as_double(i);
      if (std::isnan(rv) && std::isnan(gv)) continue;
      max_ref = std::max(max_ref, std::abs(rv));
      double err = std::isnan(rv) != std::isnan(gv) ? INFINITY : std::abs(rv - gv);
      if (err > max_err) max_err = err, worst = i;
    }
    double allowed = dtype_is_float(r.dtype()) ? c.tolerance * std::max(1.0, max_ref) : 0.0;
    EXPECT_LE(max_err, allowed) << "output " << k << " element " << worst << ": ref "
                                << r.element_as_double(worst) << " cpu " << g.element_as_double(worst);
    if (max_err > allowed) return false;
  }
  return true;
}

}  // namespace

Attributes attrs(std::initializer_list<std::pair<std::string, AttributeValue>> items) {
  Attributes a;
  for (const auto& [k, v] : items) a.set(k, v);
  return a;
}

}  // namespace kiln::testing
