// Schedulers against tools/scheduler_ref.py (diffusers' set_timesteps and
// step() in numpy): every case in tests/data/schedulers/*.json is replayed
// through make_step_tables + scheduler_step with the same fake model, and the
// timesteps, sigmas, x0 estimates and latents compared; then the config
// errors. Regenerate the data with
//   /usr/bin/python3 tools/scheduler_ref.py make-test-data tests/data/schedulers
#include "pipeline/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "npy/npy.h"

#include <fmt/format.h>

namespace kiln {
namespace {

// Tolerances. Schedules (timesteps, sigmas, init_noise_sigma) agree per
// entry: |kiln - ref| <= 1e-6 * max(1, |ref|). Latents and x0 estimates are
// float32 vectors updated in float32 arithmetic (the reference steps in
// float64): an entry near 0 that results from cancelling terms the size of
// the vector's largest carries their rounding, so the bound there is
// 1e-6 * max(1, max_k |ref_k|).
constexpr double kRelTolerance = 1e-6;

bool close(double got, double want, double scale) {
  return std::abs(got - want) <= kRelTolerance * std::max({1.0, std::abs(want), scale});
}

// Compares a vector, reporting only its first mismatch; per_tensor scales
// the bound by the vector's largest reference entry.
void expect_close(const std::vector<double>& got, const nlohmann::json& want, const std::string& what,
                  bool per_tensor = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  if (per_tensor)
    for (const auto& w : want) scale = std::max(scale, std::abs(w.get<double>()));
  for (size_t k = 0; k < got.size(); ++k) {
    const double w = want[k].get<double>();
    if (!close(got[k], w, scale)) {
      ADD_FAILURE() << what << "[" << k << "]: kiln " << got[k] << ", reference " << w;
      return;
    }
  }
}

template <typename T>
std::vector<double> as_doubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// out = 0.3 model_input + 0.1 sin(i + k), rounded to float32: fake_model() in scheduler_ref.py.
std::vector<float> fake_model(const std::vector<float>& model_input, int i) {
  std::vector<float> out(model_input.size());
  for (size_t k = 0; k < out.size(); ++k)
    out[k] = static_cast<float>(0.3 * double(model_input[k]) + 0.1 * std::sin(double(i) + double(k)));
  return out;
}

void replay_case(const SchedulerConfig& config, const nlohmann::json& c) {
  const std::string kind_name = c["scheduler"];
  const int steps = c["steps"];
  auto kind = parse_scheduler_kind(kind_name);
  ASSERT_TRUE(kind.ok()) << kind.status().message();
  const int first_step = c.value("first_step", 0);  // image to image
  auto tables = make_step_tables(*kind, config, steps, first_step);
  ASSERT_TRUE(tables.ok()) << tables.status().message();
  const StepTables& t = *tables;
  ASSERT_EQ(t.steps(), steps - first_step);
  expect_close(as_doubles(t.timestep), c["timesteps"], "timesteps");
  expect_close(t.sigmas, c["sigmas"], "sigmas");
  EXPECT_TRUE(close(t.init_noise_sigma, c["init_noise_sigma"].get<double>(), 0))
      << "init_noise_sigma: kiln " << t.init_noise_sigma << ", reference " << c["init_noise_sigma"];
  EXPECT_EQ(t.needs_noise, c.contains("noise"));

  std::vector<float> x = c["x_start"].get<std::vector<float>>();
  const size_t n = x.size();
  if (first_step) {  // kiln's own start from the image and the noise
    const auto image = c["image"].get<std::vector<float>>(), noise = c["start_noise"].get<std::vector<float>>();
    for (size_t k = 0; k < n; ++k) x[k] = t.image_scale * image[k] + t.image_noise_scale * noise[k];
    expect_close(as_doubles(x), c["x_start"], "x_start", /*per_tensor=*/true);
  }
  // NaN: the first step must not read the previous x0 estimate.
  std::vector<float> denoised(n, std::numeric_limits<float>::quiet_NaN());
  for (int row = 0; row < t.steps(); ++row) {
    const int i = first_step + row;  // the step of the whole schedule (the fake model sees it)
    SCOPED_TRACE("step " + std::to_string(i));
    std::vector<float> model_input(n);
    for (size_t k = 0; k < n; ++k) model_input[k] = t.in_scale[row] * x[k];
    const std::vector<float> out = fake_model(model_input, i);
    std::vector<float> noise;
    if (t.needs_noise) noise = c["noise"][row].get<std::vector<float>>();
    scheduler_step(t, row, x.data(), out.data(), denoised.data(), t.needs_noise ? noise.data() : nullptr, x.data(),
                   n);
    expect_close(as_doubles(denoised), c["denoised"][row], "denoised", /*per_tensor=*/true);
    expect_close(as_doubles(x), c["x"][row], "x", /*per_tensor=*/true);
  }
}

TEST(Scheduler, MatchesTheReference) {
  const std::filesystem::path dir = std::filesystem::path(KILN_SOURCE_DIR) / "tests/data/schedulers";
  int files = 0, cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    auto text = read_file(entry.path().string());
    ASSERT_TRUE(text.ok()) << text.status().message();
    const auto data = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(data.is_discarded()) << entry.path();
    auto config = scheduler_config_from_json(data["config_json"].get<std::string>());
    ASSERT_TRUE(config.ok()) << entry.path() << ": " << config.status().message();
    for (const auto& c : data["cases"]) {
      SCOPED_TRACE(entry.path().filename().string() + ": " + c["scheduler"].get<std::string>() + ", " +
                   std::to_string(c["steps"].get<int>()) + " steps from " + std::to_string(c.value("first_step", 0)));
      replay_case(*config, c);
      ++cases;
    }
  }
  EXPECT_GE(files, 8);
  EXPECT_GE(cases, 60);
}

SchedulerConfig sd15() {
  auto c = scheduler_config_from_json(R"({"_class_name": "PNDMScheduler", "beta_start": 0.00085,
      "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000,
      "set_alpha_to_one": false, "skip_prk_steps": true, "steps_offset": 1, "trained_betas": null,
      "clip_sample": false})");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : SchedulerConfig{};
}

// The error must say `words`.
void expect_error(const Status& s, std::initializer_list<const char*> words) {
  ASSERT_FALSE(s.ok());
  for (const char* w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
}

TEST(Scheduler, NamesABadFieldAndItsValue) {
  expect_error(scheduler_config_from_json(R"({"beta_schedule": "cubic"})").status(), {"beta_schedule", "cubic"});
  expect_error(scheduler_config_from_json(R"({"prediction_type": "noise"})").status(), {"prediction_type", "noise"});
  expect_error(scheduler_config_from_json(R"({"timestep_spacing": "even"})").status(), {"timestep_spacing", "even"});
  expect_error(scheduler_config_from_json(R"({"num_train_timesteps": "many"})").status(), {"num_train_timesteps"});
  expect_error(scheduler_config_from_json(R"({"num_train_timesteps": 0})").status(), {"num_train_timesteps"});
  expect_error(scheduler_config_from_json(R"({"beta_end": 2.5})").status(), {"beta_end", "2.5"});
  expect_error(scheduler_config_from_json(R"({"use_karras_sigmas": "yes"})").status(), {"use_karras_sigmas"});
}

TEST(Scheduler, RefusesWhatItDoesNotImplement) {
  for (const char* json : {R"({"thresholding": true})", R"({"rescale_betas_zero_snr": true})",
                           R"({"use_dynamic_shifting": true})", R"({"interpolation_type": "log_linear"})",
                           R"({"lambda_min_clipped": -5.1})", R"({"trained_betas": [0.1, 0.2]})"}) {
    auto c = scheduler_config_from_json(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_EQ(c.status().code(), StatusCode::kUnsupported) << c.status().message();
  }
  SchedulerConfig clip = sd15();
  clip.clip_sample = true;
  expect_error(make_step_tables(SchedulerKind::kDdim, clip, 4).status(), {"ddim", "clip_sample"});
  SchedulerConfig sample = sd15();
  sample.prediction_type = PredictionType::kSample;
  expect_error(make_step_tables(SchedulerKind::kEulerAncestral, sample, 4).status(), {"euler_a", "sample"});
  // numpy's arange gives trailing spacing 62 timesteps for 61 steps (the last -1).
  SchedulerConfig trailing = sd15();
  trailing.timestep_spacing = TimestepSpacing::kTrailing;
  expect_error(make_step_tables(SchedulerKind::kEuler, trailing, 61).status(), {"trailing", "61"});
  EXPECT_TRUE(make_step_tables(SchedulerKind::kEuler, trailing, 60).ok());
}

TEST(Scheduler, ReadsPythonsInfinity) {
  // diffusers writes DPM-Solver's lambda_min_clipped = -inf as -Infinity.
  auto c = scheduler_config_from_json(R"({"_class_name": "DPMSolverMultistepScheduler",
      "lambda_min_clipped": -Infinity, "variance_type": null, "note": "NaN and -Infinity in a string"})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(default_scheduler_kind(*c), SchedulerKind::kDpmpp2m);
}

TEST(Scheduler, RejectsBadStepCounts) {
  const SchedulerConfig c = sd15();
  for (SchedulerKind kind : {SchedulerKind::kDdim, SchedulerKind::kEuler, SchedulerKind::kDpmpp2m}) {
    expect_error(make_step_tables(kind, c, 0).status(), {"steps 0"});
    expect_error(make_step_tables(kind, c, 1001).status(), {"steps 1001"});
  }
  EXPECT_TRUE(make_step_tables(SchedulerKind::kEuler, c, 1000).ok());
  SchedulerConfig one_timestep = c;  // built in code, past the parser's checks
  one_timestep.num_train_timesteps = 1;
  expect_error(make_step_tables(SchedulerKind::kEuler, one_timestep, 1).status(), {"num_train_timesteps"});
}

TEST(Scheduler, RejectsMalformedJsonAndMissingFiles) {
  expect_error(scheduler_config_from_json("{\"beta_start\": 0.1,").status(), {"not valid JSON"});
  expect_error(scheduler_config_from_json("[1, 2]").status(), {"object"});
  const std::string missing = "/nonexistent/kiln/scheduler_config.json";
  expect_error(load_scheduler_config(missing).status(), {missing.c_str()});

  const std::string bad = ::testing::TempDir() + "/kiln_bad_scheduler_config.json";
  ASSERT_TRUE(write_file(bad, R"({"prediction_type": "x0"})").ok());
  expect_error(load_scheduler_config(bad).status(), {bad.c_str(), "prediction_type", "x0"});
}

TEST(Scheduler, LoadsAConfigFile) {
  const std::string path = ::testing::TempDir() + "/kiln_scheduler_config.json";
  ASSERT_TRUE(write_file(path, R"({"_class_name": "EulerDiscreteScheduler", "beta_schedule": "scaled_linear",
      "beta_start": 0.00085, "beta_end": 0.012, "timestep_spacing": "leading", "steps_offset": 1})").ok());
  auto c = load_scheduler_config(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->beta_schedule, BetaSchedule::kScaledLinear);
  EXPECT_EQ(c->steps_offset, 1);
  auto t = make_step_tables(default_scheduler_kind(*c), *c, 20);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_FLOAT_EQ(t->timestep[0], 951.0f);  // leading: 950 + steps_offset
  // Leading spacing: sqrt(sigma_max^2 + 1), sigma_max the sigma at timestep 951.
  EXPECT_NEAR(t->sigmas[0], 11.0283, 1e-4);
  EXPECT_NEAR(t->init_noise_sigma, std::sqrt(t->sigmas[0] * t->sigmas[0] + 1), 1e-5);
}

TEST(Scheduler, ParsesKindsAndClasses) {
  for (const char* name : {"ddim", "euler", "euler_a", "dpmpp_2m", "flow_euler"}) {
    auto kind = parse_scheduler_kind(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_STREQ(scheduler_kind_name(*kind), name);
    auto from_class = scheduler_kind_for_class(scheduler_kind_class(*kind));
    ASSERT_TRUE(from_class.ok());
    EXPECT_EQ(*from_class, *kind);
  }
  expect_error(parse_scheduler_kind("heun").status(), {"heun", "ddim", "euler_a", "dpmpp_2m", "flow_euler"});

  bool substituted = false;
  EXPECT_EQ(default_scheduler_kind(sd15(), &substituted), SchedulerKind::kEuler);  // PNDMScheduler
  EXPECT_TRUE(substituted);
  SchedulerConfig flow;
  flow.class_name = "FlowMatchHeunDiscreteScheduler";
  EXPECT_EQ(default_scheduler_kind(flow, &substituted), SchedulerKind::kFlowEuler);
  EXPECT_TRUE(substituted);
}

TEST(Scheduler, KeepsFlowAndNoiseModelsApart) {
  expect_error(make_step_tables(SchedulerKind::kFlowEuler, sd15(), 4).status(), {"flow_euler", "PNDMScheduler"});
  SchedulerConfig flow;
  flow.class_name = "FlowMatchEulerDiscreteScheduler";
  expect_error(make_step_tables(SchedulerKind::kEuler, flow, 4).status(), {"euler", "FlowMatchEulerDiscreteScheduler"});
  EXPECT_TRUE(make_step_tables(SchedulerKind::kFlowEuler, flow, 4).ok());
}

// DPM++ 2M's first step and its last (final sigma 0) are first order, the
// others read the previous x0 estimate; the tables say so.
TEST(Scheduler, Dpmpp2mTablesShowItsOrder) {
  auto t = make_step_tables(SchedulerKind::kDpmpp2m, sd15(), 6);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->needs_prev);
  EXPECT_FALSE(t->needs_noise);
  EXPECT_EQ(t->c_prev.front(), 0.0f);
  EXPECT_EQ(t->c_prev.back(), 0.0f);
  for (int i = 1; i < 5; ++i) EXPECT_NE(t->c_prev[i], 0.0f) << i;
  EXPECT_EQ(t->sigmas.back(), 0.0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// UniPC for Wan (flow sigmas, shift 5, bh2 order 2) against tools/wan/unipc.py,
// a float64 numpy transcription of diffusers' UniPCMultistepScheduler: the
// timesteps and sigmas it sets, and the latents after every step of a run
// with fixed model outputs (tests/models/wan-tiny/reference/scheduler).
TEST(UniPc, MatchesTheOracle) {
  const std::filesystem::path dir =
      std::filesystem::path(KILN_SOURCE_DIR) / "tests" / "models" / "wan-tiny" / "reference" / "scheduler";
  for (int steps : {4, 10, 50}) {
    SCOPED_TRACE(steps);
    auto tables = make_step_tables(SchedulerKind::kUniPc, wan_scheduler_config(), steps);
    ASSERT_TRUE(tables.ok()) << tables.status().message();
    const Tensor timesteps = *npy_read((dir / fmt::format("timesteps_{}.npy", steps)).string());
    const Tensor sigmas = *npy_read((dir / fmt::format("sigmas_{}.npy", steps)).string());
    for (int i = 0; i < steps; ++i) EXPECT_EQ(int64_t(tables->timestep[size_t(i)]), timesteps.data<int64_t>()[i]) << i;
    for (int i = 0; i <= steps; ++i) EXPECT_EQ(float(tables->sigmas[size_t(i)]), sigmas.data<float>()[i]) << i;
    const std::filesystem::path run = dir / fmt::format("unipc_{}", steps);
    const Tensor x_t = *npy_read((run / "inputs" / "x_T.npy").string());
    const Tensor outputs = *npy_read((run / "inputs" / "model_outputs.npy").string());
    const Tensor trajectory = *npy_read((run / "outputs" / "trajectory.npy").string());
    const size_t n = size_t(x_t.numel());
    std::vector<float> x(x_t.data<float>(), x_t.data<float>() + n), corrected(n, 0), m1(n, 0), m2(n, 0);
    for (int i = 0; i < steps; ++i) {
      unipc_step(*tables, i, x.data(), outputs.data<float>() + i * n, corrected.data(), m1.data(), m2.data(),
                 x.data(), n);
      nlohmann::json want = nlohmann::json::array();
      for (size_t k = 0; k < n; ++k) want.push_back(trajectory.data<float>()[i * n + k]);
      expect_close(as_doubles(x), want, fmt::format("latents after step {}", i), true);
    }
  }
}

TEST(UniPc, RefusesWhatItDoesNotImplement) {
  SchedulerConfig eps = wan_scheduler_config();
  eps.prediction_type = PredictionType::kEpsilon;
  eps.use_flow_sigmas = false;
  EXPECT_FALSE(make_step_tables(SchedulerKind::kUniPc, eps, 10).ok());
  auto bh1 = scheduler_config_from_json(
      R"({"_class_name": "UniPCMultistepScheduler", "solver_type": "bh1", "prediction_type": "flow_prediction"})");
  ASSERT_FALSE(bh1.ok());
  EXPECT_NE(bh1.status().message().find("solver_type"), std::string::npos) << bh1.status().message();
  auto wan = scheduler_config_from_json(
      R"({"_class_name": "UniPCMultistepScheduler", "flow_shift": 5.0, "prediction_type": "flow_prediction",
          "use_flow_sigmas": true, "solver_order": 2, "solver_type": "bh2", "disable_corrector": []})");
  ASSERT_TRUE(wan.ok()) << wan.status().message();
  EXPECT_EQ(default_scheduler_kind(*wan), SchedulerKind::kUniPc);
  EXPECT_EQ(wan->shift, 5.0);
}

}  // namespace
}  // namespace kiln
