// The compiled plan: arena layout, I/O binding by pointer, replay without
// heap allocation, and its errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "heap_counter/heap_counter.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln {
namespace {

// y = LayerNorm(softmax(x * 2 + b) + x), reshaped and transposed: kernels
// from every group that does not call oneDNN, with a symbolic batch dim.
Graph norm_graph() {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(8)});
  Value* two = g.add_constant("two", *Tensor::from_vector<float>({}, {2.0f}));
  Value* b = g.add_constant("b", *Tensor::from_vector<float>({8}, {0, 1, 2, 3, 4, 5, 6, 7}));
  Value* scale = g.add_constant("scale", *Tensor::from_vector<float>({8}, std::vector<float>(8, 1.5f)));
  Value* shape = g.add_constant("shape", *Tensor::from_vector<int64_t>({3}, {-1, 2, 4}));
  auto v = [&](const char* name) { return g.add_value(name); };
  Value *m = v("m"), *a = v("a"), *s = v("s"), *r = v("r"), *n = v("n"), *rs = v("rs"), *y = v("y");
  g.add_node(OpKind::kMul, "mul", {x, two}, {m});
  g.add_node(OpKind::kAdd, "add", {m, b}, {a});
  g.add_node(OpKind::kSoftmax, "softmax", {a}, {s});
  g.add_node(OpKind::kAdd, "residual", {s, x}, {r});
  g.add_node(OpKind::kLayerNormalization, "ln", {r, scale}, {n});
  g.add_node(OpKind::kReshape, "reshape", {n, shape}, {rs});
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{0, 2, 1});
  g.add_node(OpKind::kTranspose, "transpose", {rs}, {y}, perm);
  g.mark_output(y);
  return g;
}

Tensor ramp(Shape shape, float step) {
  auto t = Tensor::empty(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = float(i) * step - 1.0f;
  return *t;
}

std::vector<float> values(const TensorView& v) { return {v.as<float>(), v.as<float>() + v.numel()}; }

std::vector<float> eager_output(const Tensor& x) {
  Graph g = norm_graph();
  EagerExecutor exec(g);
  auto out = exec.run({{"x", x}});
  EXPECT_TRUE(out.ok()) << out.status().message();
  return values((*out)[0].view());
}

std::unique_ptr<Plan> compile(int64_t batch) {
  auto plan = Plan::compile(norm_graph(), {.dims = {{"batch", batch}}});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? std::move(plan).value() : nullptr;
}

TEST(Plan, MatchesEagerAndReadsInputsInPlace) {
  auto plan = compile(3);
  ASSERT_TRUE(plan);
  Tensor x = ramp({3, 8}, 0.1f);
  ASSERT_TRUE(plan->bind_input("x", x.view()).ok());
  ASSERT_TRUE(plan->run().ok());
  EXPECT_EQ(plan->output(0).shape, (Shape{3, 4, 2}));
  std::vector<float> first = values(plan->output(0));
  for (size_t i = 0; i < first.size(); ++i) EXPECT_NEAR(first[i], eager_output(x)[i], 1e-6f) << i;

  // The plan reads the bound memory itself: change it, run again, no rebind.
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= -0.5f;
  ASSERT_TRUE(plan->run().ok());
  std::vector<float> second = values(plan->output(0));
  EXPECT_NE(first, second);
  for (size_t i = 0; i < second.size(); ++i) EXPECT_NEAR(second[i], eager_output(x)[i], 1e-6f) << i;
}

// An idle plan's arena given back to the system is mapped afresh by the
// next run, which computes the same.
TEST(Plan, RunsAgainAfterReleasingItsArena) {
  auto plan = compile(8192);  // an arena of whole pages
  ASSERT_TRUE(plan);
  ASSERT_GT(plan->stats().arena_bytes, size_t(256) << 10);
  Tensor x = ramp({8192, 8}, 0.0002f);
  ASSERT_TRUE(plan->bind_input("x", x.view()).ok());
  ASSERT_TRUE(plan->run().ok());
  const std::vector<float> first = values(plan->output(0));
  plan->release_arena_memory();
  ASSERT_TRUE(plan->run().ok());
  EXPECT_EQ(values(plan->output(0)), first);
}

TEST(Plan, WritesBoundOutputsIntoCallerMemory) {
  auto plan = compile(2);
  ASSERT_TRUE(plan);
  Tensor x = ramp({2, 8}, 0.3f);
  auto y = Tensor::empty(DType::kF32, {2, 4, 2});
  ASSERT_TRUE(plan->bind_input("x", x.view()).ok());
  ASSERT_TRUE(plan->bind_output("y", y->view()).ok());
  ASSERT_TRUE(plan->run().ok());
  EXPECT_EQ(plan->output(0).data, y->raw());
  EXPECT_EQ(plan->output_copy_bytes(), 0u);
  std::vector<float> want = eager_output(x);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-6f);
}

// A caller that binds an output to fresh memory each run (a pipeline's
// latents) gets it written there, never into the memory bound before.
TEST(Plan, RebindsAnOutputToNewMemory) {
  auto plan = compile(2);
  ASSERT_TRUE(plan);
  Tensor x = ramp({2, 8}, 0.3f);
  ASSERT_TRUE(plan->bind_input("x", x.view()).ok());
  auto first = Tensor::empty(DType::kF32, {2, 4, 2});
  auto second = Tensor::empty(DType::kF32, {2, 4, 2});
  ASSERT_TRUE(plan->bind_output("y", first->view()).ok());
  ASSERT_TRUE(plan->run().ok());
  for (int64_t i = 0; i < first->numel(); ++i) first->data<float>()[i] = -7.0f;
  ASSERT_TRUE(plan->bind_output("y", second->view()).ok());
  ASSERT_TRUE(plan->run().ok());
  EXPECT_EQ(plan->output(0).data, second->raw());
  EXPECT_EQ(plan->output_copy_bytes(), 0u);
  std::vector<float> want = eager_output(x);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(second->data<float>()[i], want[i], 1e-6f);
    EXPECT_EQ(first->data<float>()[i], -7.0f) << "the old binding was written";
  }
}

TEST(Plan, ReplayAllocatesNothing) {
  if (!HeapCounter::available()) GTEST_SKIP() << "no allocation counter under AddressSanitizer";
  auto plan = compile(64);
  ASSERT_TRUE(plan);
  Tensor x = ramp({64, 8}, 0.01f);
  ASSERT_TRUE(plan->bind_input("x", x.view()).ok());
  ASSERT_TRUE(plan->run().ok());
  HeapCounter heap;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(plan->run().ok());
  EXPECT_EQ(heap.allocations(), 0);
}

TEST(Plan, ArenaReusesMemoryAcrossSteps) {
  auto plan = compile(1024);
  ASSERT_TRUE(plan);
  const PlanStats& st = plan->stats();
  EXPECT_GE(st.arena_bytes, st.lower_bound_bytes);
  EXPECT_LT(st.arena_bytes, st.naive_bytes);
  EXPECT_EQ(st.steps, 6);  // the Reshape is a view: no step
}

TEST(Plan, RejectsBadBindings) {
  auto plan = compile(2);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->run().message(), "input 'x' is not bound");
  Tensor wrong = ramp({3, 8}, 0.1f);
  Status st = plan->bind_input("x", wrong.view());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "input 'x' must have shape [2,8] (the plan's signature), got [3,8]");
  EXPECT_EQ(plan->bind_input("z", wrong.view()).message(), "the model has no input named 'z'");
  EXPECT_EQ(plan->bind_output("y", wrong.view()).code(), StatusCode::kInvalidArgument);
}

TEST(Plan, NeedsEverySymbolicDim) {
  auto plan = Plan::compile(norm_graph(), {});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "input 'x': give a size for dim 'batch'");
}

TEST(Plan, InputDimsFromShapes) {
  Graph g = norm_graph();
  auto dims = input_dims(g, {{"x", {5, 8}}});
  ASSERT_TRUE(dims.ok());
  EXPECT_EQ(dims->at("batch"), 5);
  EXPECT_FALSE(input_dims(g, {{"x", {5, 8, 1}}}).ok());
  EXPECT_FALSE(input_dims(g, {{"q", {5, 8}}}).ok());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// latent' = latent * 0.5 + noise: an output that may overwrite its input.
Graph step_graph(bool read_again) {
  Graph g;
  Value* x = g.add_input("latent", DType::kF32, SymShape{Dim(4), Dim(8)});
  Value* noise = g.add_input("noise", DType::kF32, SymShape{Dim(4), Dim(8)});
  Value* half = g.add_constant("half", *Tensor::from_vector<float>({}, {0.5f}));
  Value* scaled = g.add_value("scaled");
  Value* next = g.add_value("next");
  g.add_node(OpKind::kMul, "scale", {x, half}, {scaled});
  g.add_node(OpKind::kAdd, "add", {scaled, noise}, {next});
  g.mark_output(next);
  if (read_again) {  // the latent is read once more after `next` is written
    Value* again = g.add_value("again");
    g.add_node(OpKind::kAdd, "again", {next, x}, {again});
    g.mark_output(again);
  }
  return g;
}

TEST(Plan, FeedsAnOutputBackAsTheNextRunsInputWithoutCopying) {
  auto plan = Plan::compile(step_graph(false), {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  Tensor latent = *Tensor::from_vector<float>({4, 8}, std::vector<float>(32, 8.0f));
  Tensor noise = *Tensor::from_vector<float>({4, 8}, std::vector<float>(32, 1.0f));
  // `latent` is both the input and the output: written in place each run.
  ASSERT_TRUE((*plan)->bind_input("latent", latent.view()).ok());
  ASSERT_TRUE((*plan)->bind_input("noise", noise.view()).ok());
  ASSERT_TRUE((*plan)->bind_output("next", latent.view()).ok());
  for (int step = 0; step < 3; ++step) ASSERT_TRUE((*plan)->run().ok());
  EXPECT_EQ(latent.data<float>()[0], 2.75f);  // 8 -> 5 -> 3.5 -> 2.75
  EXPECT_EQ((*plan)->output(0).data, latent.raw());
}

// x' = (x * x + x) * 0.5 + relu(c): relu(c) reads no loop-carried input. It
// runs after x * x dies, so without the loop's lifetimes the arena would give
// it x * x's memory, which the next iteration overwrites before relu(c) is
// read again.
TEST(Plan, RunsLoopInvariantStepsOncePerRepeatedRun) {
  Graph g;
  const SymShape shape{Dim(64)};
  Value* x = g.add_input("x", DType::kF32, shape);
  Value* c = g.add_input("c", DType::kF32, shape);
  Value* half = g.add_constant("half", *Tensor::from_vector<float>({}, {0.5f}));
  auto v = [&](const char* name) { return g.add_value(name); };
  Value *sq = v("sq"), *sum = v("sum"), *inv = v("inv"), *halved = v("halved"), *next = v("next");
  g.add_node(OpKind::kMul, "square", {x, x}, {sq});
  g.add_node(OpKind::kAdd, "sum", {sq, x}, {sum});
  g.add_node(OpKind::kRelu, "relu", {c}, {inv});
  g.add_node(OpKind::kMul, "halve", {sum, half}, {halved});
  g.add_node(OpKind::kAdd, "next", {halved, inv}, {next});
  g.mark_output(next);
  auto plan = Plan::compile(std::move(g), {.loop_carried = {"x"}});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ((*plan)->stats().loop_invariant_steps, 1);

  auto expect = [](std::vector<float> x, const std::vector<float>& c, int times) {
    for (int t = 0; t < times; ++t)
      for (size_t i = 0; i < x.size(); ++i) x[i] = (x[i] * x[i] + x[i]) * 0.5f + std::max(c[i], 0.0f);
    return x;
  };
  std::vector<float> x0(64), c0(64);
  for (int i = 0; i < 64; ++i) x0[size_t(i)] = 0.01f * float(i % 7), c0[size_t(i)] = 0.1f * float(i % 5) - 0.2f;
  Tensor xt = *Tensor::from_vector<float>({64}, x0), ct = *Tensor::from_vector<float>({64}, c0);
  ASSERT_TRUE((*plan)->bind_input("x", xt.view()).ok());
  ASSERT_TRUE((*plan)->bind_input("c", ct.view()).ok());
  ASSERT_TRUE((*plan)->bind_output("next", xt.view()).ok());
  ASSERT_TRUE((*plan)->run_repeated(3).ok());
  std::vector<float> want = expect(x0, c0, 3);
  for (size_t i = 0; i < 64; ++i) ASSERT_FLOAT_EQ(xt.data<float>()[i], want[i]) << i;
  // A new run_repeated call computes the invariant steps again from the new c.
  for (float& f : c0) f += 0.3f;
  std::copy(c0.begin(), c0.end(), ct.data<float>());
  ASSERT_TRUE((*plan)->run_repeated(2).ok());
  want = expect(want, c0, 2);
  for (size_t i = 0; i < 64; ++i) ASSERT_FLOAT_EQ(xt.data<float>()[i], want[i]) << i;
}

TEST(Plan, RefusesBindingsThatWouldOverwriteAnInputStillRead) {
  auto plan = Plan::compile(step_graph(true), {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  Tensor latent = *Tensor::from_vector<float>({4, 8}, std::vector<float>(32, 8.0f));
  Tensor noise = *Tensor::from_vector<float>({4, 8}, std::vector<float>(32, 1.0f));
  ASSERT_TRUE((*plan)->bind_input("latent", latent.view()).ok());
  ASSERT_TRUE((*plan)->bind_input("noise", noise.view()).ok());
  ASSERT_TRUE((*plan)->run().ok());
  // An output view of the arena passed back as an input: the run would clobber it.
  TensorView view = (*plan)->output(0);
  ASSERT_TRUE((*plan)->bind_input("latent", view).ok());
  EXPECT_NE((*plan)->run().message().find("points into the plan's arena"), std::string::npos);
  // The latent is read again after `next` is written: sharing memory is refused.
  ASSERT_TRUE((*plan)->bind_input("latent", latent.view()).ok());
  ASSERT_TRUE((*plan)->bind_output("next", latent.view()).ok());
  EXPECT_EQ((*plan)->run().message(),
            "output 'next' shares memory with input 'latent', which node 'again' (Add) still reads after node 'add' "
            "(Add) writes the output: bind the output to another buffer");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A weight stored in f16 (kernel.h): widened once at the step's first call,
// the wide copy and the f16 constant both gone once the kernel has packed
// its own; the results those of the weight given in f32.
TEST(Plan, StoredWeightsAreWidenedOnceAndNotKept) {
  auto graph = [](DType weight_dtype) {
    Graph g;
    Value* x = g.add_input("x", DType::kF32, SymShape{Dim(3), Dim(40)});
    Tensor w = ramp({24, 40}, 0.001f);
    if (weight_dtype == DType::kF16) {
      Tensor half = *Tensor::empty(DType::kF16, {24, 40});
      for (int64_t i = 0; i < w.numel(); ++i) half.data<f16>()[i] = f32_to_f16(w.data<float>()[i]);
      w = half;
    } else {
      for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = f16_to_f32(f32_to_f16(w.data<float>()[i]));
    }
    Value* y = g.add_value("y");
    g.add_node(OpKind::kLinear, "fc", {x, g.add_constant("w", w)}, {y}, Attributes{{"transB", int64_t(1)}});
    g.mark_output(y);
    return g;
  };
  const Tensor x = ramp({3, 40}, 0.01f);
  std::vector<std::vector<float>> results;
  for (DType dtype : {DType::kF16, DType::kF32}) {
    auto plan = Plan::compile(graph(dtype), {});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    ASSERT_TRUE((*plan)->bind_input("x", x.view()).ok());
    ASSERT_TRUE((*plan)->run().ok());
    results.push_back(values((*plan)->output(0)));
    EXPECT_FALSE((*plan)->graph_whole()) << "the weight is freed once packed";
    EXPECT_GE((*plan)->stats().packed_weight_bytes, size_t(24 * 40 * 4)) << "only the packed copy is counted";
    EXPECT_LT((*plan)->stats().packed_weight_bytes, size_t(2 * 24 * 40 * 4)) << "no wide copy beside it";
  }
  EXPECT_EQ(results[0], results[1]);
  // Eager widens it too, and gets the same: kept wide for the next run, or,
  // past the limit on kept copies, widened at each run.
  Graph g = graph(DType::kF16);
  for (size_t limit : {size_t(1) << 20, size_t(0)}) {
    EagerExecutor exec(g);
    exec.set_widened_kept_limit(limit);
    for (int run = 0; run < 2; ++run) {
      auto eager = exec.run({{"x", x}});
      ASSERT_TRUE(eager.ok()) << eager.status().message();
      EXPECT_EQ(values((*eager)[0].view()), results[1]);
      EXPECT_EQ(exec.widened_kept_bytes(), limit ? size_t(24 * 40 * 4) : 0);
    }
  }
}

}  // namespace
}  // namespace kiln
