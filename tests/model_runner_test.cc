// Execution modes, the plan cache and the run report (what --profile shows).
#include "runtime/model_runner.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace kiln {
namespace {

// y = (x @ w) * 2 with x [batch, 16], w [16, 8].
Result<Graph> small_model() {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("batch"), Dim(16)});
  Value* w = g.add_constant("w", *Tensor::from_vector<float>({16, 8}, std::vector<float>(128, 0.5f)));
  Value* two = g.add_constant("two", *Tensor::from_vector<float>({}, {2.0f}));
  Value* mm = g.add_value("mm");
  Value* y = g.add_value("y");
  g.add_node(OpKind::kMatMul, "mm", {x, w}, {mm});
  g.add_node(OpKind::kMul, "mul", {mm, two}, {y});
  g.mark_output(y);
  KILN_RETURN_IF_ERROR(graph_infer_shapes(g));
  return g;
}

Tensor ones(int64_t batch) { return *Tensor::from_vector<float>({batch, 16}, std::vector<float>(size_t(batch) * 16, 1.0f)); }

TEST(ModelRunner, GraphModeCachesOnePlanPerSignature) {
  auto runner = ModelRunner::create(small_model, {.mode = ExecutionMode::kGraph});
  ASSERT_TRUE(runner.ok());
  for (int64_t batch : {3, 3, 5, 3}) {
    auto out = (*runner)->run({{"x", ones(batch)}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ((*out)[0].shape(), (Shape{batch, 8}));
    EXPECT_EQ((*out)[0].data<float>()[0], 16.0f);  // 16 x 0.5 x 2
  }
  EXPECT_EQ((*runner)->stats().plan_misses, 2);  // batch 3, batch 5
  EXPECT_EQ((*runner)->stats().plan_hits, 2);
  const RunReport& r = (*runner)->last_report();
  EXPECT_TRUE(r.plan_cache_hit);
  EXPECT_EQ(r.compile_ms, 0);
  EXPECT_EQ(r.mode, "graph");
  EXPECT_EQ(r.signature, "x:f32[3,16]");
  EXPECT_EQ(r.flops, 2 * 3 * 8 * 16);
  EXPECT_EQ(r.input_copy_bytes, 0u);
  EXPECT_EQ(r.output_clone_bytes, 0u);
}

// small_model, counting the loads in `loads`.
ModelRunner::GraphLoader counting(int& loads) {
  return [&loads] {
    ++loads;
    return small_model();
  };
}

// Graph mode keeps no eager copy of the weights: the first plan compiles the
// graph create() loaded, and only another signature loads the model again.
TEST(ModelRunner, GraphModeLoadsTheModelOncePerPlan) {
  int loads = 0;
  auto runner = ModelRunner::create(counting(loads), {.mode = ExecutionMode::kGraph});
  ASSERT_TRUE(runner.ok());
  EXPECT_EQ(loads, 1);
  EXPECT_FALSE((*runner)->holds_eager_weights());
  for (int64_t batch : {3, 3}) {
    auto out = (*runner)->run({{"x", ones(batch)}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ((*out)[0].data<float>()[0], 16.0f);
  }
  EXPECT_EQ(loads, 1);
  auto other = (*runner)->run({{"x", ones(5)}});
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(loads, 2);
  // The inputs are still checked, against the model's.
  auto wrong = (*runner)->run({{"x", ones(2)}, {"z", ones(2)}});
  EXPECT_FALSE(wrong.ok());
  auto missing = (*runner)->run({});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("input 'x' is missing"), std::string::npos) << missing.status().message();
}

// Auto lets the eager weights go before a plan compiles and drops a plan
// that loses, so whichever way each signature goes (the timings decide),
// the weights are read again only where they had gone and are needed.
TEST(ModelRunner, AutoHoldsOneCopyOfTheWeights) {
  int loads = 0;
  auto runner = ModelRunner::create(counting(loads), {.mode = ExecutionMode::kAuto});
  ASSERT_TRUE(runner.ok());
  EXPECT_TRUE((*runner)->holds_eager_weights());
  int expected_loads = 1;
  bool any_eager = false;  // some signature chose eager
  std::set<int64_t> seen;
  for (int64_t batch : {3, 3, 5}) {
    const bool timed = seen.insert(batch).second;  // a new signature
    const bool held = (*runner)->holds_eager_weights();
    auto out = (*runner)->run({{"x", ones(batch)}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ((*out)[0].data<float>()[0], 16.0f);
    const bool eager = (*runner)->last_mode() == ExecutionMode::kEager;
    if (timed) {
      // Eager's weights if they had gone; the plan; eager's again if it won
      // and had let them go for the plan.
      expected_loads += !held + 1 + (eager && !any_eager);
      any_eager = any_eager || eager;
    }
    EXPECT_EQ(loads, expected_loads) << "batch " << batch;
    EXPECT_EQ((*runner)->holds_eager_weights(), any_eager) << "batch " << batch;
  }
  if (any_eager) {
    // A signature that chose eager kept no plan: asking for one compiles it.
    const int64_t misses = (*runner)->stats().plan_misses;
    for (int64_t batch : {3, 5}) {
      auto out = (*runner)->run({{"x", ones(batch)}});
      ASSERT_TRUE(out.ok());
      if ((*runner)->last_mode() == ExecutionMode::kEager) {
        ASSERT_TRUE((*runner)->plan_for({{"x", ones(batch)}}).ok());
        EXPECT_EQ((*runner)->stats().plan_misses, misses + 1);
        break;
      }
    }
  }
}

TEST(ModelRunner, SafeOutputClonesAndCountsTheBytes) {
  auto runner = ModelRunner::create(small_model, {.mode = ExecutionMode::kGraph, .safe_output = true});
  ASSERT_TRUE(runner.ok());
  auto first = (*runner)->run({{"x", ones(2)}});
  ASSERT_TRUE(first.ok());
  auto second = (*runner)->run({{"x", ones(2)}});
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*first)[0].raw(), (*second)[0].raw());  // copies, not views of the arena
  EXPECT_EQ((*runner)->last_report().output_clone_bytes, 2u * 8 * 4);
  EXPECT_EQ((*runner)->stats().output_clone_bytes, 2u * 2 * 8 * 4);
}

TEST(ModelRunner, AutoTimesBothModesOnceAndSaysWhich) {
  std::vector<std::string> log;
  auto runner = ModelRunner::create(
      small_model, {.mode = ExecutionMode::kAuto, .log = [&](const std::string& line) { log.push_back(line); }});
  ASSERT_TRUE(runner.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*runner)->run({{"x", ones(4)}}).ok());
  ASSERT_EQ(log.size(), 1u);  // decided once per signature
  EXPECT_NE(log[0].find("graph"), std::string::npos);
  EXPECT_NE(log[0].find("eager"), std::string::npos);
  EXPECT_NE(log[0].find("x:f32[4,16]"), std::string::npos);
  EXPECT_NE((*runner)->last_mode(), ExecutionMode::kAuto);
}

TEST(ModelRunner, ReportFormats) {
  auto runner = ModelRunner::create(small_model, {.mode = ExecutionMode::kGraph, .profile_steps = true});
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE((*runner)->run({{"x", ones(2)}}).ok());
  const RunReport& r = (*runner)->last_report();
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_NE(report_table(r).find("MatMul"), std::string::npos);
  EXPECT_EQ(report_json(r)["ops"]["Mul"]["calls"], 1);
  auto trace = nlohmann::json::parse(chrome_trace(r));
  int steps = 0;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    steps += e["cat"] == "step";
  }
  EXPECT_EQ(steps, 2);
}

TEST(ModelRunner, ParsesModes) {
  EXPECT_EQ(*parse_execution_mode("auto"), ExecutionMode::kAuto);
  EXPECT_EQ(parse_execution_mode("fast").status().message(), "unknown mode 'fast' (modes: eager, graph, auto)");
}

}  // namespace
}  // namespace kiln
