// Stages: parse the config (strict about values, lenient about unknown
// fields, as diffusers' from_config is); build the schedule each diffusers
// class builds in set_timesteps(), rounding to float32 exactly where
// diffusers stores float32; turn each step() into its coefficient row.
//
// The numpy functions diffusers calls are reproduced (np_linspace, np_interp,
// trailing_timesteps) down to their operation order, so timesteps and sigmas
// agree with tools/scheduler_ref.py to the last bits in almost every case.
#include "pipeline/scheduler.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <span>

#include "core/mapped_file.h"

namespace kiln {

namespace {

struct KindInfo {
  SchedulerKind kind;
  const char* name;
  const char* class_name;
};
constexpr KindInfo kKinds[] = {
#define KILN_SCHEDULER_INFO(kind, name, cls) {SchedulerKind::kind, name, cls},
    KILN_SCHEDULER_KINDS(KILN_SCHEDULER_INFO)
#undef KILN_SCHEDULER_INFO
};

const KindInfo& kind_info(SchedulerKind kind) {
  for (const KindInfo& k : kKinds)
    if (k.kind == kind) return k;
  assert(false && "every SchedulerKind is in kKinds");
  return kKinds[0];
}

// -- config -------------------------------------------------------------

// scheduler_config.json is a few hundred bytes; the cap keeps a hostile file
// from costing nlohmann's parser memory per open bracket.
constexpr size_t kMaxConfigBytes = 64 * 1024;
constexpr int kMaxTrainTimesteps = 1'000'000;

template <typename E>
struct EnumName {
  const char* name;
  E value;
};
constexpr EnumName<BetaSchedule> kBetaSchedules[] = {
    {"linear", BetaSchedule::kLinear},
    {"scaled_linear", BetaSchedule::kScaledLinear},
    {"squaredcos_cap_v2", BetaSchedule::kSquaredCosCapV2},
};
constexpr EnumName<PredictionType> kPredictionTypes[] = {
    {"epsilon", PredictionType::kEpsilon},
    {"v_prediction", PredictionType::kVPrediction},
    {"sample", PredictionType::kSample},
    {"flow_prediction", PredictionType::kFlow},
};
constexpr EnumName<TimestepSpacing> kSpacings[] = {
    {"leading", TimestepSpacing::kLeading},
    {"trailing", TimestepSpacing::kTrailing},
    {"linspace", TimestepSpacing::kLinspace},
};
constexpr EnumName<FinalSigmas> kFinalSigmas[] = {
    {"zero", FinalSigmas::kZero},
    {"sigma_min", FinalSigmas::kSigmaMin},
};

// Fields whose value changes the schedule in a way kiln does not implement,
// with the one value (as JSON) kiln does; null or absent is always fine.
struct FixedField {
  const char* field;
  const char* implemented;
};
constexpr FixedField kFixedFields[] = {
    {"thresholding", "false"},           {"rescale_betas_zero_snr", "false"},
    {"use_dynamic_shifting", "false"},   {"use_exponential_sigmas", "false"},
    {"use_beta_sigmas", "false"},        {"use_lu_lambdas", "false"},
    {"stochastic_sampling", "false"},    {"invert_sigmas", "false"},
    {"trained_betas", "null"},           {"sigma_min", "null"},
    {"sigma_max", "null"},               {"shift_terminal", "null"},
    {"timestep_type", "\"discrete\""},   {"interpolation_type", "\"linear\""},
    {"rho", "7"},                        {"lambda_min_clipped", "\"-Infinity\""},
};

// Python's json.dump writes float('-inf') as -Infinity (DPM-Solver configs
// carry "lambda_min_clipped": -Infinity), which JSON lacks: such tokens are
// quoted, and the number reader takes the strings back.
std::string quote_python_constants(std::string_view text) {
  constexpr std::string_view kTokens[] = {"-Infinity", "Infinity", "NaN"};
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool quoted = false;
    for (std::string_view token : kTokens) {
      if (text.substr(i, token.size()) == token) {
        out += fmt::format("\"{}\"", token);
        i += token.size() - 1;
        quoted = true;
        break;
      }
    }
    if (!quoted) out += c;
  }
  return out;
}

std::string json_text(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Reads one config field at a time; absent or null leaves the default.
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& json) : json_(json) {}

  const nlohmann::json* find(const char* field) const {
    auto it = json_.find(field);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }

  Status number(const char* field, double* out) const {
    const nlohmann::json* v = find(field);
    if (!v) return ok_status();
    if (v->is_number()) {
      *out = v->get<double>();
    } else if (v->is_string() && v->get_ref<const std::string&>() == "-Infinity") {
      *out = -INFINITY;
    } else if (v->is_string() && v->get_ref<const std::string&>() == "Infinity") {
      *out = INFINITY;
    } else if (v->is_string() && v->get_ref<const std::string&>() == "NaN") {
      *out = NAN;
    } else {
      return invalid_argument("{} must be a number, not {}", field, json_text(*v));
    }
    return ok_status();
  }

  Status finite(const char* field, double lo, double hi, double* out) const {
    KILN_RETURN_IF_ERROR(number(field, out));
    if (!(*out >= lo && *out <= hi)) return invalid_argument("{} {} is outside [{}, {}]", field, *out, lo, hi);
    return ok_status();
  }

  Status integer(const char* field, int lo, int hi, int* out) const {
    const nlohmann::json* v = find(field);
    if (!v) return ok_status();
    const double d = v->is_number() ? v->get<double>() : NAN;
    if (d != std::floor(d)) return invalid_argument("{} must be an integer, not {}", field, json_text(*v));
    if (d < lo || d > hi) return invalid_argument("{} {} is outside [{}, {}]", field, json_text(*v), lo, hi);
    *out = static_cast<int>(d);
    return ok_status();
  }

  Status boolean(const char* field, bool* out) const {
    const nlohmann::json* v = find(field);
    if (!v) return ok_status();
    if (!v->is_boolean()) return invalid_argument("{} must be true or false, not {}", field, json_text(*v));
    *out = v->get<bool>();
    return ok_status();
  }

  template <typename E, size_t N>
  Status choice(const char* field, const EnumName<E> (&names)[N], E* out) const {
    const nlohmann::json* v = find(field);
    if (!v) return ok_status();
    std::vector<std::string_view> valid;
    for (const EnumName<E>& e : names) {
      if (v->is_string() && v->get_ref<const std::string&>() == e.name) {
        *out = e.value;
        return ok_status();
      }
      valid.push_back(e.name);
    }
    return invalid_argument("{} {} is not one of {}", field, json_text(*v), fmt::join(valid, ", "));
  }

 private:
  const nlohmann::json& json_;
};

Status parse_config(const nlohmann::json& json, SchedulerConfig* c) {
  if (!json.is_object()) return invalid_argument("expected a JSON object");
  ConfigReader r(json);
  for (const FixedField& f : kFixedFields) {
    const nlohmann::json* v = r.find(f.field);
    if (v && *v != nlohmann::json::parse(f.implemented))
      return unsupported("{} = {} is not supported (kiln implements {})", f.field, json_text(*v), f.implemented);
  }
  if (const nlohmann::json* v = r.find("variance_type");
      v && (*v == "learned" || *v == "learned_range"))
    return unsupported("variance_type = {} is not supported", json_text(*v));

  if (const nlohmann::json* v = r.find("_class_name")) {
    if (!v->is_string()) return invalid_argument("_class_name must be a string, not {}", json_text(*v));
    c->class_name = v->get<std::string>();
  }
  KILN_RETURN_IF_ERROR(r.integer("num_train_timesteps", 2, kMaxTrainTimesteps, &c->num_train_timesteps));
  KILN_RETURN_IF_ERROR(r.choice("beta_schedule", kBetaSchedules, &c->beta_schedule));
  KILN_RETURN_IF_ERROR(r.finite("beta_start", 0.0, 1.0, &c->beta_start));
  KILN_RETURN_IF_ERROR(r.finite("beta_end", 0.0, 1.0, &c->beta_end));
  KILN_RETURN_IF_ERROR(r.choice("prediction_type", kPredictionTypes, &c->prediction_type));
  TimestepSpacing spacing{};
  if (r.find("timestep_spacing")) {
    KILN_RETURN_IF_ERROR(r.choice("timestep_spacing", kSpacings, &spacing));
    c->timestep_spacing = spacing;
  }
  KILN_RETURN_IF_ERROR(r.integer("steps_offset", 0, kMaxTrainTimesteps, &c->steps_offset));
  KILN_RETURN_IF_ERROR(r.boolean("use_karras_sigmas", &c->use_karras_sigmas));
  KILN_RETURN_IF_ERROR(r.boolean("set_alpha_to_one", &c->set_alpha_to_one));
  KILN_RETURN_IF_ERROR(r.boolean("clip_sample", &c->clip_sample));
  KILN_RETURN_IF_ERROR(r.choice("final_sigmas_type", kFinalSigmas, &c->final_sigmas_type));
  KILN_RETURN_IF_ERROR(r.boolean("lower_order_final", &c->lower_order_final));
  KILN_RETURN_IF_ERROR(r.boolean("euler_at_final", &c->euler_at_final));
  // Wan's configs name the shift flow_shift.
  KILN_RETURN_IF_ERROR(r.finite(r.find("shift") ? "shift" : "flow_shift", 1e-6, 1e6, &c->shift));
  // UniPC's own fields.
  KILN_RETURN_IF_ERROR(r.boolean("use_flow_sigmas", &c->use_flow_sigmas));
  KILN_RETURN_IF_ERROR(r.integer("solver_order", 1, 2, &c->solver_order));
  KILN_RETURN_IF_ERROR(r.boolean("predict_x0", &c->predict_x0));
  KILN_RETURN_IF_ERROR(r.integer("original_inference_steps", 1, kMaxTrainTimesteps, &c->original_inference_steps));
  KILN_RETURN_IF_ERROR(r.finite("timestep_scaling", 1e-6, 1e6, &c->timestep_scaling));
  if (const nlohmann::json* v = r.find("solver_type"); v && c->class_name == "UniPCMultistepScheduler" && *v != "bh2")
    return unsupported("solver_type = {} is not supported (kiln implements \"bh2\")", json_text(*v));
  if (const nlohmann::json* v = r.find("disable_corrector"); v && !(v->is_array() && v->empty()))
    return unsupported("disable_corrector = {} is not supported (kiln implements [])", json_text(*v));
  return ok_status();
}

// -- numpy, as diffusers calls it ------------------------------------------

// np.linspace(start, stop, num): k * step + start, the last element exactly stop.
std::vector<double> np_linspace(double start, double stop, int num) {
  std::vector<double> y(num);
  const double step = num > 1 ? (stop - start) / (num - 1) : 0.0;
  for (int k = 0; k < num; ++k) y[k] = k * step + start;
  if (num > 1) y[num - 1] = stop;
  return y;
}

// np.interp(x, arange(len(ys)), ys): clamped at the ends, exact at grid points.
double np_interp(double x, std::span<const float> ys) {
  const int n = static_cast<int>(ys.size());
  if (!(x > 0)) return ys[0];
  if (x >= n - 1) return ys[n - 1];
  const int j = static_cast<int>(std::floor(x));
  if (x == j) return ys[j];
  const double slope = double(ys[j + 1]) - double(ys[j]);
  return slope * (x - j) + ys[j];
}

// np.arange(start, 0, -n / steps).round() as diffusers' "trailing" spacing
// uses it. numpy fills an arange from its first two values (start + i *
// ((start + step) - start)) and sizes it by ceil(-start / step), which at some
// step counts (61 of 1000 training steps, ...) gives one value too many, whose
// rounding makes the timestep -1 in diffusers; such counts are refused.
Result<std::vector<double>> trailing_timesteps(double start, int n, int steps) {
  const double step = -double(n) / steps;
  const double length = std::ceil((0.0 - start) / step);
  if (length != steps)
    return invalid_argument("timestep_spacing 'trailing' with {} steps gives {} timesteps (numpy's arange)", steps,
                            length);
  const double delta = (start + step) - start;
  std::vector<double> t(steps);
  for (int i = 0; i < steps; ++i) t[i] = std::nearbyint(i == 0 ? start : start + i * delta);  // half to even
  return t;
}

// -- the training schedule -------------------------------------------------

// alphas_cumprod in float32 as diffusers holds it. The betas are float64
// linspace rounded to float32 (torch's float32 linspace rounds a few of them
// an ulp differently); torch.cumprod on the CPU accumulates in double.
std::vector<float> alphas_cumprod(const SchedulerConfig& c) {
  const int n = c.num_train_timesteps;
  std::vector<float> betas(n);
  if (c.beta_schedule == BetaSchedule::kSquaredCosCapV2) {
    auto alpha_bar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * std::numbers::pi / 2), 2); };
    for (int i = 0; i < n; ++i)
      betas[i] = static_cast<float>(std::min(1 - alpha_bar(double(i + 1) / n) / alpha_bar(double(i) / n), 0.999));
  } else if (c.beta_schedule == BetaSchedule::kScaledLinear) {
    std::vector<double> root = np_linspace(std::pow(c.beta_start, 0.5), std::pow(c.beta_end, 0.5), n);
    for (int i = 0; i < n; ++i) betas[i] = static_cast<float>(root[i]) * static_cast<float>(root[i]);
  } else {
    std::vector<double> b = np_linspace(c.beta_start, c.beta_end, n);
    for (int i = 0; i < n; ++i) betas[i] = static_cast<float>(b[i]);
  }
  std::vector<float> ac(n);
  double product = 1.0;
  for (int i = 0; i < n; ++i) {
    product *= double(1.0f - betas[i]);
    ac[i] = static_cast<float>(product);
  }
  return ac;
}

// sqrt((1 - ac) / ac) in float32 ops, as diffusers computes it from the tensor.
std::vector<float> train_sigmas(std::span<const float> ac) {
  std::vector<float> s(ac.size());
  for (size_t i = 0; i < ac.size(); ++i) s[i] = std::sqrt((1.0f - ac[i]) / ac[i]);
  return s;
}

// k-diffusion's Karras ramp (rho = 7) from sigma_max down to sigma_min.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int steps) {
  const double rho = 7.0;
  const double min_inv_rho = std::pow(sigma_min, 1 / rho), max_inv_rho = std::pow(sigma_max, 1 / rho);
  std::vector<double> s = np_linspace(0, 1, steps);
  for (double& r : s) r = std::pow(max_inv_rho + r * (min_inv_rho - max_inv_rho), rho);
  return s;
}

// diffusers' _sigma_to_t: the fractional training timestep whose sigma is
// `sigma`, interpolating log sigma between neighbours. log_sigmas are float32,
// so is their difference there.
double sigma_to_t(double sigma, std::span<const float> log_sigmas) {
  const double log_sigma = std::log(std::max(sigma, 1e-10));
  const int n = static_cast<int>(log_sigmas.size());
  int low = 0;  // the last index whose log sigma is <= log_sigma (cumsum(...).argmax()), 0 when none
  for (int k = 0; k < n; ++k)
    if (log_sigma - double(log_sigmas[k]) >= 0) low = k;
  low = std::min(low, n - 2);
  const float lo = log_sigmas[low], hi = log_sigmas[low + 1];
  const float span = lo - hi;
  const double w = std::clamp((lo - log_sigma) / span, 0.0, 1.0);
  return (1 - w) * low + w * (low + 1);
}

std::vector<float> float_logs(std::span<const float> xs) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out[i] = static_cast<float>(std::log(double(xs[i])));
  return out;
}

// -- coefficient rows ------------------------------------------------------

struct Row {
  double timestep = 0, in_scale = 1, d_x = 0, d_out = 0, c_x = 0, c_out = 0, c_prev = 0, c_noise = 0;
};

// x0 from the model output when the model saw x_model = scale * x and
// x_model = alpha x0 + sigma eps (DDIM's sqrt(alpha_cumprod) and
// sqrt(1 - alpha_cumprod); for sigma-parameterised schedules 1 / sqrt(s^2 + 1)
// and s / sqrt(s^2 + 1)).
void set_x0(PredictionType p, double alpha, double sigma, double scale, Row* r) {
  switch (p) {
    case PredictionType::kEpsilon: r->d_x = scale / alpha, r->d_out = -sigma / alpha; break;
    case PredictionType::kVPrediction: r->d_x = alpha * scale, r->d_out = -sigma; break;
    case PredictionType::kSample:
    case PredictionType::kFlow: r->d_x = 0, r->d_out = 1; break;
  }
}

struct Schedule {
  std::vector<Row> rows;
  std::vector<double> sigmas;
  float init_noise_sigma = 1.0f;
};

double sigma_of_alpha(double alpha_cumprod) { return std::sqrt((1 - alpha_cumprod) / alpha_cumprod); }

Status ddim_schedule(const SchedulerConfig& c, int steps, Schedule* s) {
  if (c.clip_sample) return unsupported("clip_sample = true is not supported");
  const int n = c.num_train_timesteps;
  std::vector<double> t(steps);
  switch (c.timestep_spacing.value_or(TimestepSpacing::kLeading)) {
    case TimestepSpacing::kLinspace: {
      std::vector<double> l = np_linspace(0, n - 1, steps);
      for (int i = 0; i < steps; ++i) t[i] = std::nearbyint(l[steps - 1 - i]);
      break;
    }
    case TimestepSpacing::kLeading:
      for (int i = 0; i < steps; ++i) t[i] = double(steps - 1 - i) * (n / steps) + c.steps_offset;
      break;
    case TimestepSpacing::kTrailing: {
      KILN_ASSIGN_OR_RETURN(t, trailing_timesteps(n, n, steps));
      for (double& v : t) v -= 1;
      break;
    }
  }
  const std::vector<float> ac = alphas_cumprod(c);
  const double final_alpha = c.set_alpha_to_one ? 1.0 : ac[0];
  for (int i = 0; i < steps; ++i) {
    if (t[i] < 0 || t[i] >= n)
      return invalid_argument("timestep {} at step {} is outside the {} training timesteps", t[i], i, n);
    // diffusers steps back by num_train_timesteps // steps whatever the spacing.
    const int prev = static_cast<int>(t[i]) - n / steps;
    const double a = ac[static_cast<int>(t[i])], a_prev = prev >= 0 ? ac[prev] : final_alpha;
    const double alpha = std::sqrt(a), sigma = std::sqrt(1 - a);
    Row r{.timestep = t[i]};
    set_x0(c.prediction_type, alpha, sigma, 1.0, &r);
    // The noise estimate eps = e_x x + e_out out.
    double e_x = 0, e_out = 1;
    if (c.prediction_type == PredictionType::kVPrediction) e_x = sigma, e_out = alpha;
    if (c.prediction_type == PredictionType::kSample) e_x = 1 / sigma, e_out = -alpha / sigma;
    // eta = 0: x_prev = sqrt(a_prev) x0 + sqrt(1 - a_prev) eps.
    r.c_x = std::sqrt(a_prev) * r.d_x + std::sqrt(1 - a_prev) * e_x;
    r.c_out = std::sqrt(a_prev) * r.d_out + std::sqrt(1 - a_prev) * e_out;
    s->rows.push_back(r);
    s->sigmas.push_back(sigma_of_alpha(a));
  }
  s->sigmas.push_back(sigma_of_alpha(final_alpha));
  return ok_status();
}

// Euler's and Euler ancestral's timesteps (float32) and sigmas (float32, one
// more than the steps).
Status euler_sigmas(const SchedulerConfig& c, int steps, bool karras, std::span<const float> ts,
                    std::vector<float>* timesteps, std::vector<float>* sigmas) {
  const int n = c.num_train_timesteps;
  std::vector<float> t(steps);
  switch (c.timestep_spacing.value_or(TimestepSpacing::kLinspace)) {
    case TimestepSpacing::kLinspace: {
      std::vector<double> l = np_linspace(0, n - 1, steps);
      for (int i = 0; i < steps; ++i) t[i] = static_cast<float>(l[steps - 1 - i]);
      break;
    }
    case TimestepSpacing::kLeading:
      for (int i = 0; i < steps; ++i)
        t[i] = static_cast<float>(double(steps - 1 - i) * (n / steps)) + static_cast<float>(c.steps_offset);
      break;
    case TimestepSpacing::kTrailing: {
      KILN_ASSIGN_OR_RETURN(std::vector<double> r, trailing_timesteps(n, n, steps));
      for (int i = 0; i < steps; ++i) t[i] = static_cast<float>(r[i]) - 1.0f;
      break;
    }
  }
  std::vector<double> sig(steps);
  for (int i = 0; i < steps; ++i) sig[i] = np_interp(t[i], ts);
  if (karras) {
    sig = karras_sigmas(sig[steps - 1], sig[0], steps);
    const std::vector<float> log_sigmas = float_logs(ts);
    for (int i = 0; i < steps; ++i) t[i] = static_cast<float>(sigma_to_t(sig[i], log_sigmas));
  }
  *timesteps = t;
  sigmas->resize(steps + 1);
  for (int i = 0; i < steps; ++i) (*sigmas)[i] = static_cast<float>(sig[i]);
  (*sigmas)[steps] = c.final_sigmas_type == FinalSigmas::kSigmaMin ? ts[0] : 0.0f;
  return ok_status();
}

// diffusers' LCMScheduler. Timesteps: every k-th of the training ones
// (k = num_train_timesteps / original_inference_steps, t = k j - 1),
// descending, `steps` of them at floor(linspace(0, count, steps)) indices.
// A step: x0 from the prediction, the consistency estimate
// denoised = c_out x0 + c_skip x (boundary-condition scalings at 10 t), then
// renoised to the next timestep, x_next = sqrt(a_next) denoised +
// sqrt(1 - a_next) noise; the last step returns denoised itself.
Status lcm_schedule(const SchedulerConfig& c, int steps, Schedule* s) {
  const int n = c.num_train_timesteps, original = c.original_inference_steps;
  if (original > n)
    return invalid_argument("original_inference_steps {} is more than the {} training timesteps", original, n);
  if (steps > original)
    return invalid_argument("{} steps is more than original_inference_steps ({}): LCM picks its steps from those",
                            steps, original);
  const int k = n / original;
  const double stride = double(original) / steps;  // np.linspace(0, original, steps, endpoint=False)'s step
  std::vector<int> t(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const int index = static_cast<int>(std::floor(i * stride));
    t[size_t(i)] = (original - index) * k - 1;  // the descending grid's entry `index`
  }
  const std::vector<float> ac = alphas_cumprod(c);
  const double final_alpha = c.set_alpha_to_one ? 1.0 : ac[0];
  constexpr double kSigmaData = 0.5;
  for (int i = 0; i < steps; ++i) {
    const double a = ac[size_t(t[size_t(i)])];
    const bool last = i + 1 == steps;
    const double a_next = last ? a : ac[size_t(t[size_t(i + 1)])];
    const double scaled = t[size_t(i)] * c.timestep_scaling;
    const double c_skip = kSigmaData * kSigmaData / (scaled * scaled + kSigmaData * kSigmaData);
    const double c_out = scaled / std::sqrt(scaled * scaled + kSigmaData * kSigmaData);
    Row r{.timestep = double(t[size_t(i)])};
    set_x0(c.prediction_type, std::sqrt(a), std::sqrt(1 - a), 1.0, &r);
    const double keep = last ? 1.0 : std::sqrt(a_next);
    r.c_x = keep * (c_out * r.d_x + c_skip);
    r.c_out = keep * c_out * r.d_out;
    r.c_noise = last ? 0.0 : std::sqrt(1 - a_next);
    s->rows.push_back(r);
    s->sigmas.push_back(sigma_of_alpha(a));
  }
  s->sigmas.push_back(sigma_of_alpha(final_alpha));
  return ok_status();
}

Status euler_schedule(const SchedulerConfig& c, int steps, bool ancestral, Schedule* s) {
  if (ancestral && c.prediction_type == PredictionType::kSample)
    return unsupported("prediction_type 'sample' is not implemented by EulerAncestralDiscreteScheduler");
  const std::vector<float> ts = train_sigmas(alphas_cumprod(c));
  std::vector<float> t, sig;
  // diffusers' Euler ancestral has neither Karras sigmas nor a final sigma option.
  SchedulerConfig cc = c;
  if (ancestral) cc.final_sigmas_type = FinalSigmas::kZero;
  KILN_RETURN_IF_ERROR(euler_sigmas(cc, steps, c.use_karras_sigmas && !ancestral, ts, &t, &sig));
  for (int i = 0; i < steps; ++i) {
    const double sigma = sig[i], sigma_next = sig[i + 1];
    const double alpha = 1 / std::sqrt(sigma * sigma + 1);
    Row r{.timestep = t[i], .in_scale = alpha};
    set_x0(c.prediction_type, alpha, sigma * alpha, alpha, &r);
    double dt = sigma_next - sigma;
    if (ancestral) {
      const double up = std::sqrt(sigma_next * sigma_next * (sigma * sigma - sigma_next * sigma_next) / (sigma * sigma));
      const double down = std::sqrt(sigma_next * sigma_next - up * up);
      dt = down - sigma;
      r.c_noise = up;
    }
    // x_next = x + (x - x0) / sigma * dt.
    r.c_x = 1 + (1 - r.d_x) * dt / sigma;
    r.c_out = -r.d_out * dt / sigma;
    s->rows.push_back(r);
  }
  s->sigmas.assign(sig.begin(), sig.end());
  const float max_sigma = *std::max_element(sig.begin(), sig.end());
  const TimestepSpacing spacing = c.timestep_spacing.value_or(TimestepSpacing::kLinspace);
  s->init_noise_sigma =
      spacing == TimestepSpacing::kLeading ? std::sqrt(max_sigma * max_sigma + 1.0f) : max_sigma;  // float32, as torch
  return ok_status();
}

// `begin`: the step a partial run (image to image) starts at; its first step
// is first-order, as diffusers' multistep state starts empty there.
Status dpmpp_2m_schedule(const SchedulerConfig& c, int steps, int begin, Schedule* s) {
  const int n = c.num_train_timesteps;
  const std::vector<float> ts = train_sigmas(alphas_cumprod(c));
  std::vector<double> t(steps);
  switch (c.timestep_spacing.value_or(TimestepSpacing::kLinspace)) {
    case TimestepSpacing::kLinspace: {  // steps + 1 points, the last (0) dropped
      std::vector<double> l = np_linspace(0, n - 1, steps + 1);
      for (int i = 0; i < steps; ++i) t[i] = std::nearbyint(l[steps - i]);
      break;
    }
    case TimestepSpacing::kLeading:
      for (int i = 0; i < steps; ++i) t[i] = double(steps - i) * (n / (steps + 1)) + c.steps_offset;
      break;
    case TimestepSpacing::kTrailing: {
      KILN_ASSIGN_OR_RETURN(t, trailing_timesteps(n, n, steps));
      for (double& v : t) v -= 1;
      break;
    }
  }
  std::vector<double> sig(steps + 1);
  if (c.use_karras_sigmas) {
    const std::vector<double> k = karras_sigmas(ts[0], ts[n - 1], steps);
    const std::vector<float> log_sigmas = float_logs(ts);
    for (int i = 0; i < steps; ++i) {
      sig[i] = static_cast<float>(k[i]);
      t[i] = std::nearbyint(sigma_to_t(k[i], log_sigmas));
    }
  } else {
    for (int i = 0; i < steps; ++i) sig[i] = static_cast<float>(np_interp(t[i], ts));
  }
  sig[steps] = c.final_sigmas_type == FinalSigmas::kSigmaMin ? ts[0] : 0.0;

  // diffusers' lower_order_final: the last step first-order when the final sigma is 0, for fewer than 15
  // steps, or with euler_at_final.
  const bool last_first_order =
      c.euler_at_final || (c.lower_order_final && steps < 15) || c.final_sigmas_type == FinalSigmas::kZero;
  auto alpha_of = [](double sigma) { return 1 / std::sqrt(sigma * sigma + 1); };
  for (int i = 0; i < steps; ++i) {
    const double sigma_s = sig[i], sigma_t = sig[i + 1];
    const double alpha_s = alpha_of(sigma_s), alpha_t = alpha_of(sigma_t);
    Row r{.timestep = t[i]};
    set_x0(c.prediction_type, alpha_s, sigma_s * alpha_s, 1.0, &r);
    // lambda = log(alpha / sigma_vp) = -log(sigma), so exp(-h) = sigma_t / sigma_s, 0 at the end.
    const double ratio = (sigma_t * alpha_t) / (sigma_s * alpha_s);
    const double a = alpha_t * (1 - sigma_t / sigma_s);  // -alpha_t (exp(-h) - 1)
    if (i <= begin || (i == steps - 1 && last_first_order)) {
      // x_t = ratio x + a D0
      r.c_x = ratio + a * r.d_x;
      r.c_out = a * r.d_out;
    } else {
      // Midpoint: x_t = ratio x + a D0 + a / 2 (D0 - D_prev) / r0, r0 = h_prev / h.
      const double r0 = std::log(sig[i - 1] / sigma_s) / std::log(sigma_s / sigma_t);
      const double b = a * (1 + 0.5 / r0);
      r.c_x = ratio + b * r.d_x;
      r.c_out = b * r.d_out;
      r.c_prev = -0.5 * a / r0;
    }
    s->rows.push_back(r);
  }
  s->sigmas = sig;
  return ok_status();
}

Status flow_euler_schedule(const SchedulerConfig& c, int steps, Schedule* s) {
  if (c.use_karras_sigmas) return unsupported("use_karras_sigmas with flow_euler is not supported");
  const int n = c.num_train_timesteps;
  const float nf = static_cast<float>(n);
  // The training sigmas' ends, in torch's float32 ops (the scalars cast to float32).
  auto shifted32 = [&](float sigma) {
    return static_cast<float>(c.shift) * sigma / (1.0f + static_cast<float>(c.shift - 1) * sigma);
  };
  const double sigma_max = shifted32(nf / nf), sigma_min = shifted32(1.0f / nf);
  // Inference sigmas in float64 between the shifted ends, shifted again (the
  // lower end twice, as diffusers does), stored as float32.
  std::vector<double> t = np_linspace(sigma_max * n, sigma_min * n, steps);
  std::vector<float> sig(steps + 1, 0.0f);
  for (int i = 0; i < steps; ++i) {
    const double u = t[i] / n;
    sig[i] = static_cast<float>(c.shift * u / (1 + (c.shift - 1) * u));
  }
  for (int i = 0; i < steps; ++i) {
    Row r{.timestep = sig[i] * nf, .d_x = 1, .d_out = -double(sig[i])};
    r.c_x = 1;
    r.c_out = double(sig[i + 1]) - double(sig[i]);
    s->rows.push_back(r);
  }
  s->sigmas.assign(sig.begin(), sig.end());
  return ok_status();
}

// UniPC (bh2, predict_x0) over diffusers' flow sigmas (use_flow_sigmas):
// sigma = linspace(1, 1/n, steps + 1)[:-1] shifted s u / (1 + (s - 1) u) in
// float64, the first nudged below 1, timesteps int64(sigma n) from those,
// then the sigmas rounded to float32 and a final 0; every coefficient in
// double from the float32 sigmas. With alpha = 1 - sigma and lambda =
// ln alpha - ln sigma, step i from s = sigma_i to t = sigma_{i+1}, h =
// lambda_t - lambda_s, the x0 estimates m_i = x_i - sigma_i v_i:
//   corrector (UniC, i > 0, of the last predictor's order q):
//     c_i = sigma_i/sigma_{i-1} c_{i-1} - alpha_i phi m_{i-1} - alpha_i B (rho_0 D + rho_q (m_i - m_{i-1}))
//   predictor (UniP, order p = min(solver_order, steps - i, i + 1)):
//     x_{i+1} = t/s c_i - alpha_t phi m_i - alpha_t B rho (m_{i-1} - m_i) / r
// with phi = B = e^-h - 1 (bh2), D = (m_{i-2} - m_{i-1}) / r, r the ratio of
// the last two lambda steps, rho 1/2 for the order-2 predictor and the
// order-1 corrector, else the solution of UniPC's order conditions. The
// step to sigma = 0 (lambda = inf) gives exactly m_i.
Status unipc_schedule(const SchedulerConfig& c, int steps, Schedule* s, std::vector<UniPcCoefficients>* rows) {
  if (c.prediction_type != PredictionType::kFlow || !c.use_flow_sigmas)
    return unsupported("kiln's unipc is for flow models (prediction_type \"flow_prediction\", use_flow_sigmas)");
  if (!c.predict_x0) return unsupported("predict_x0 = false is not supported");
  if (c.use_karras_sigmas) return unsupported("use_karras_sigmas with unipc is not supported");
  if (c.final_sigmas_type != FinalSigmas::kZero) return unsupported("final_sigmas_type sigma_min with unipc is not supported");
  const int n = c.num_train_timesteps;
  std::vector<double> u = np_linspace(1.0, 1.0 / n, steps + 1);
  std::vector<double> sig(steps + 1, 0.0);
  for (int i = 0; i < steps; ++i) {
    double v = c.shift * u[i] / (1 + (c.shift - 1) * u[i]);
    if (i == 0 && std::abs(v - 1) < 1e-6) v -= 1e-6;  // diffusers keeps lambda finite at the start
    s->rows.push_back({.timestep = std::floor(v * n), .in_scale = 1, .d_x = 1});
    sig[i] = static_cast<float>(v);
    s->rows.back().d_out = -sig[i];
  }
  s->sigmas = sig;
  auto lambda = [&](int i) { return std::log(1 - sig[i]) - std::log(sig[i]); };
  // UniPC's B(h) and the rhos for ratios rks (the last one 1): R rho = b,
  // R's row k the rks to the k-th power, b_k = k! phi_{k+1}(h) / B(h).
  auto rhos = [](double h, const std::vector<double>& rks) {
    const double hh = -h, b_h = std::expm1(hh);
    double phi = std::expm1(hh) / hh - 1, factorial = 1;
    std::vector<double> b;
    for (size_t k = 1; k <= rks.size(); ++k) {
      b.push_back(phi * factorial / b_h);
      factorial *= double(k + 1);
      phi = phi / hh - 1 / factorial;
    }
    if (rks.size() == 1) return std::vector<double>{0.5};
    // 2 x 2: [[1, 1], [r, 1]] rho = b.
    const double r = rks[0], det = 1 - r;
    return std::vector<double>{(b[0] - b[1]) / det, (b[1] - r * b[0]) / det};
  };
  std::vector<int> order(steps);
  for (int i = 0; i < steps; ++i)
    order[i] = std::min({c.solver_order, c.lower_order_final ? steps - i : c.solver_order, i + 1});
  for (int i = 0; i < steps; ++i) {
    UniPcCoefficients k{.m_v = -float(sig[i])};
    double c_x = 0, c_m = 0, c_c = 0, c_m1 = 0, c_m2 = 0;
    if (i == 0) {
      c_x = 1;
    } else {
      const double alpha = 1 - sig[i], h = lambda(i) - lambda(i - 1), b_h = std::expm1(-h);
      c_c = sig[i] / sig[i - 1];
      c_m1 = -alpha * b_h;  // -alpha phi m_{i-1}, phi = B
      if (order[i - 1] == 1) {
        c_m = -alpha * b_h * 0.5, c_m1 += alpha * b_h * 0.5;
      } else {
        const double r = (lambda(i - 2) - lambda(i - 1)) / h;
        const std::vector<double> rho = rhos(h, {r, 1.0});
        c_m2 = -alpha * b_h * rho[0] / r;
        c_m1 += alpha * b_h * rho[0] / r + alpha * b_h * rho[1];
        c_m = -alpha * b_h * rho[1];
      }
    }
    double p_c = 0, p_m = 1, p_m1 = 0;  // to sigma = 0: x_next = m_i
    if (sig[i + 1] > 0) {
      const double t = sig[i + 1], alpha = 1 - t, h = lambda(i + 1) - lambda(i), b_h = std::expm1(-h);
      p_c = t / sig[i];
      p_m = -alpha * b_h;
      if (order[i] == 2) {
        const double r = (lambda(i - 1) - lambda(i)) / h;
        p_m += alpha * b_h * 0.5 / r, p_m1 = -alpha * b_h * 0.5 / r;
      }
    }
    for (double v : {c_x, c_m, c_c, c_m1, c_m2, p_c, p_m, p_m1})
      if (!std::isfinite(v)) return invalid_argument("step {} of {} has a non-finite coefficient", i, steps);
    k.c_x = float(c_x), k.c_m = float(c_m), k.c_c = float(c_c), k.c_m1 = float(c_m1), k.c_m2 = float(c_m2);
    k.p_c = float(p_c), k.p_m = float(p_m), k.p_m1 = float(p_m1);
    rows->push_back(k);
  }
  return ok_status();
}

// The ranges the parser enforces, for configs built in code.
Status check_ranges(const SchedulerConfig& c) {
  if (c.num_train_timesteps < 2 || c.num_train_timesteps > kMaxTrainTimesteps)
    return invalid_argument("num_train_timesteps {} is outside [2, {}]", c.num_train_timesteps, kMaxTrainTimesteps);
  if (!(c.beta_start >= 0 && c.beta_start <= 1 && c.beta_end >= 0 && c.beta_end <= 1))
    return invalid_argument("beta_start {} and beta_end {} must be in [0, 1]", c.beta_start, c.beta_end);
  if (c.steps_offset < 0) return invalid_argument("steps_offset {} is negative", c.steps_offset);
  if (!(c.shift >= 1e-6 && c.shift <= 1e6)) return invalid_argument("shift {} is outside [1e-06, 1e+06]", c.shift);
  return ok_status();
}

bool is_flow_config(const SchedulerConfig& c) {
  return c.class_name.starts_with("FlowMatch") || c.prediction_type == PredictionType::kFlow;
}

}  // namespace

// -- API -------------------------------------------------------------------

Result<SchedulerKind> parse_scheduler_kind(std::string_view name) {
  std::vector<std::string_view> valid;
  for (const KindInfo& k : kKinds) {
    if (name == k.name) return k.kind;
    valid.push_back(k.name);
  }
  return invalid_argument("unknown scheduler '{}' (valid: {})", name, fmt::join(valid, ", "));
}

Result<TimestepSpacing> parse_timestep_spacing(std::string_view name) {
  for (const auto& [spelled, value] : kSpacings)
    if (name == spelled) return value;
  return invalid_argument("unknown timestep spacing '{}' (leading, trailing, linspace)", name);
}

const char* timestep_spacing_name(TimestepSpacing spacing) {
  for (const auto& [spelled, value] : kSpacings)
    if (value == spacing) return spelled;
  return "?";
}

const char* scheduler_kind_name(SchedulerKind kind) { return kind_info(kind).name; }
const char* scheduler_kind_class(SchedulerKind kind) { return kind_info(kind).class_name; }

Result<SchedulerConfig> scheduler_config_from_json(std::string_view json_text) {
  if (json_text.size() > kMaxConfigBytes)
    return resource_exhausted("scheduler config: {} bytes is more than the {} a config may have", json_text.size(),
                              kMaxConfigBytes);
  auto json = nlohmann::json::parse(quote_python_constants(json_text), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument("scheduler config: not valid JSON");
  SchedulerConfig config;
  if (Status s = parse_config(json, &config); !s.ok()) return s.with_context("scheduler config");
  return config;
}

Result<SchedulerConfig> load_scheduler_config(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  auto config = scheduler_config_from_json(
      std::string_view(reinterpret_cast<const char*>(file->data()), file->size()));
  if (!config.ok()) return config.status().with_context(path);
  return config;
}

Result<SchedulerKind> scheduler_kind_for_class(std::string_view class_name) {
  std::vector<std::string_view> known;
  for (const KindInfo& k : kKinds) {
    if (class_name == k.class_name) return k.kind;
    known.push_back(k.class_name);
  }
  return not_found("scheduler class '{}' is not one kiln implements ({})", class_name, fmt::join(known, ", "));
}

SchedulerKind default_scheduler_kind(const SchedulerConfig& config, bool* substituted) {
  auto kind = scheduler_kind_for_class(config.class_name);
  if (substituted) *substituted = !kind.ok();
  if (kind.ok()) return *kind;
  return is_flow_config(config) ? SchedulerKind::kFlowEuler : SchedulerKind::kEuler;
}

TimestepSpacing default_timestep_spacing(std::string_view class_name) {
  for (std::string_view leading : {"DDIMScheduler", "PNDMScheduler", "DDPMScheduler"})
    if (class_name == leading) return TimestepSpacing::kLeading;
  return TimestepSpacing::kLinspace;
}

int image_to_image_first_step(int steps, double strength) {
  const int denoised = std::min(static_cast<int>(steps * strength), steps);  // diffusers' init_timestep
  return std::max(steps - denoised, 0);
}

Result<StepTables> make_step_tables(SchedulerKind kind, const SchedulerConfig& config, int steps, int first_step) {
  const char* name = scheduler_kind_name(kind);
  if (Status s = check_ranges(config); !s.ok()) return s.with_context(fmt::format("scheduler {}", name));
  const int n = config.num_train_timesteps;
  if (steps < 1 || steps > n)
    return invalid_argument("scheduler {}: steps {} is outside [1, {}] (num_train_timesteps)", name, steps, n);
  if (first_step < 0 || first_step >= steps)
    return invalid_argument("scheduler {}: a run from step {} of {} has no step to run", name, first_step, steps);
  const bool flow_kind = kind == SchedulerKind::kFlowEuler || kind == SchedulerKind::kUniPc;
  if ((kind == SchedulerKind::kUniPc || kind == SchedulerKind::kLcm) && first_step > 0)
    return unsupported("scheduler {}: image to image (starting at step {}) is not supported", name, first_step);
  if (config.prediction_type == PredictionType::kFlow && !flow_kind)
    return invalid_argument("scheduler {}: prediction_type 'flow_prediction' needs flow_euler or unipc", name);
  if (!config.class_name.empty() && flow_kind != is_flow_config(config))
    return invalid_argument("scheduler {} is for {} models; the config is {}'s", name,
                            flow_kind ? "flow-matching" : "noise-prediction", config.class_name);
  Schedule s;
  std::vector<UniPcCoefficients> unipc;
  Status status;
  switch (kind) {
    case SchedulerKind::kDdim: status = ddim_schedule(config, steps, &s); break;
    case SchedulerKind::kEuler: status = euler_schedule(config, steps, false, &s); break;
    case SchedulerKind::kEulerAncestral: status = euler_schedule(config, steps, true, &s); break;
    case SchedulerKind::kDpmpp2m: status = dpmpp_2m_schedule(config, steps, first_step, &s); break;
    case SchedulerKind::kFlowEuler: status = flow_euler_schedule(config, steps, &s); break;
    case SchedulerKind::kUniPc: status = unipc_schedule(config, steps, &s, &unipc); break;
    case SchedulerKind::kLcm: status = lcm_schedule(config, steps, &s); break;
  }
  if (!status.ok()) return status.with_context(fmt::format("scheduler {}", name));
  assert(static_cast<int>(s.rows.size()) == steps && static_cast<int>(s.sigmas.size()) == steps + 1);

  StepTables t;
  t.kind = kind;
  t.init_noise_sigma = s.init_noise_sigma;
  t.first_step = first_step;
  // diffusers' add_noise at the first step's noise level.
  const double sigma = s.sigmas[size_t(first_step)];
  switch (kind) {
    case SchedulerKind::kDdim:
    case SchedulerKind::kDpmpp2m:  // alpha x0 + sigma_vp noise
    case SchedulerKind::kLcm:
      t.image_scale = static_cast<float>(1 / std::sqrt(sigma * sigma + 1));
      t.image_noise_scale = static_cast<float>(sigma / std::sqrt(sigma * sigma + 1));
      break;
    case SchedulerKind::kEuler:
    case SchedulerKind::kEulerAncestral:
      t.image_scale = 1.0f;
      t.image_noise_scale = static_cast<float>(sigma);
      break;
    case SchedulerKind::kFlowEuler:
    case SchedulerKind::kUniPc:
      t.image_scale = static_cast<float>(1 - sigma);
      t.image_noise_scale = static_cast<float>(sigma);
      break;
  }
  t.sigmas.assign(s.sigmas.begin() + first_step, s.sigmas.end());
  t.needs_noise = kind == SchedulerKind::kEulerAncestral || kind == SchedulerKind::kLcm;
  t.needs_prev = kind == SchedulerKind::kDpmpp2m;
  t.unipc = std::move(unipc);
  for (int i = first_step; i < steps; ++i) {
    const Row& r = s.rows[i];
    for (double v : {r.timestep, r.in_scale, r.d_x, r.d_out, r.c_x, r.c_out, r.c_prev, r.c_noise})
      if (!std::isfinite(v) || std::abs(v) > 1e30)
        return invalid_argument("scheduler {}: step {} of {} has a non-finite coefficient (degenerate schedule)",
                                name, i, steps);
    t.timestep.push_back(static_cast<float>(r.timestep));
    t.in_scale.push_back(static_cast<float>(r.in_scale));
    t.d_x.push_back(static_cast<float>(r.d_x));
    t.d_out.push_back(static_cast<float>(r.d_out));
    t.c_x.push_back(static_cast<float>(r.c_x));
    t.c_out.push_back(static_cast<float>(r.c_out));
    t.c_prev.push_back(static_cast<float>(r.c_prev));
    t.c_noise.push_back(static_cast<float>(r.c_noise));
  }
  if (!std::isfinite(t.init_noise_sigma))
    return invalid_argument("scheduler {}: init_noise_sigma is not finite", name);
  return t;
}

DenoiseCoefficients step_coefficients(const StepTables& t, int i) {
  assert(i >= 0 && i < t.steps());
  return {.c_x = t.c_x[i], .c_out = t.c_out[i], .c_prev = t.c_prev[i], .c_noise = t.c_noise[i],
          .d_x = t.d_x[i], .d_out = t.d_out[i]};
}

void scheduler_step(const StepTables& tables, int i, const float* x, const float* model_output,
                    float* denoised_prev_inout, const float* noise, float* x_next, size_t n) {
  const DenoiseCoefficients k = step_coefficients(tables, i);
  // Unused inputs are not read at all: a first step's buffer may hold anything.
  const float* prev = k.c_prev != 0 ? denoised_prev_inout : nullptr;
  const float* z = k.c_noise != 0 ? noise : nullptr;
  assert((prev || k.c_prev == 0) && (z || k.c_noise == 0));
  // denoise_update reads element j of every input before writing element j
  // of an output, so denoised_prev is read and then replaced in one pass.
  denoise_update(k, x, model_output, prev, z, x_next, denoised_prev_inout, n);
}

void unipc_step(const StepTables& tables, int i, const float* x, const float* model_output, float* corrected,
                float* x0_last, float* x0_older, float* x_next, size_t n) {
  assert(i >= 0 && i < int(tables.unipc.size()));
  unipc_update(tables.unipc[size_t(i)], x, model_output, corrected, x0_last, x0_older, x_next, corrected, x0_last,
               x0_older, n);
}

SchedulerConfig wan_scheduler_config() {
  SchedulerConfig c;
  c.class_name = "UniPCMultistepScheduler";
  c.prediction_type = PredictionType::kFlow;
  c.use_flow_sigmas = true;
  c.shift = 5.0;
  return c;
}

}  // namespace kiln
