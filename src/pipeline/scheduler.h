// Diffusion schedulers from diffusers' scheduler_config.json, as per-step
// coefficient tables.
//
// Every update kiln runs is written in one elementwise form, so a whole
// denoise loop compiles into one plan whose per-step scalars are rows of
// tables indexed by the step counter (kernels/denoise_update.h):
//
//   model input      in_scale[i] * x,  at timestep[i]
//   x0 estimate      denoised_i = d_x[i] x + d_out[i] model_output        (honours prediction_type)
//   update           x_next = c_x[i] x + c_out[i] model_output + c_prev[i] denoised_{i-1} + c_noise[i] noise_i
//
// denoised_{i-1} is the last step's x0 estimate (DPM++ 2M), noise_i a fresh
// standard normal tensor (Euler ancestral); coefficients that do not apply
// are 0. The tables are computed in double from the schedule diffusers
// builds (float32 alphas_cumprod and sigmas, rounded where diffusers rounds)
// and stored as float; tools/scheduler_ref.py is the numpy oracle.
//
//   KILN_ASSIGN_OR_RETURN(SchedulerConfig config, load_scheduler_config(dir + "/scheduler/scheduler_config.json"));
//   KILN_ASSIGN_OR_RETURN(SchedulerKind kind, parse_scheduler_kind("dpmpp_2m"));
//   KILN_ASSIGN_OR_RETURN(StepTables tables, make_step_tables(kind, config, 20));
//   // x = noise * tables.init_noise_sigma
//   for (int i = 0; i < tables.steps(); ++i) {
//     // out = model(tables.in_scale[i] * x, tables.timestep[i])
//     scheduler_step(tables, i, x, out, denoised_prev, noise_or_null, x, n);
//   }
//
//   kind        diffusers class                          notes
//   ddim        DDIMScheduler                             eta = 0
//   euler       EulerDiscreteScheduler                    use_karras_sigmas, final_sigmas_type
//   euler_a     EulerAncestralDiscreteScheduler           needs noise; as diffusers: no prediction_type "sample",
//                                                         use_karras_sigmas and final_sigmas_type ignored
//   dpmpp_2m    DPMSolverMultistepScheduler               dpmsolver++, order 2, midpoint, whatever the config says;
//                                                         use_karras_sigmas, final_sigmas_type, lower_order_final,
//                                                         euler_at_final
//   flow_euler  FlowMatchEulerDiscreteScheduler           velocity model: x_next = x + (sigma_next - sigma) v; shift
//   unipc       UniPCMultistepScheduler                   flow models only (use_flow_sigmas, flow_prediction:
//                                                         Wan); bh2, order 1 or 2, lower_order_final,
//                                                         final_sigmas_type zero; its own update over more
//                                                         state (UniPcCoefficients, kiln.UniPcStep)
//   lcm         LCMScheduler                              latent consistency models (LCM UNets, LCM-LoRA):
//                                                         every step a consistency estimate, renoised to the
//                                                         next timestep (needs noise); original_inference_steps,
//                                                         timestep_scaling; no image to image
//
// Config fields read, with diffusers' defaults when absent: num_train_timesteps,
// beta_schedule (linear | scaled_linear | squaredcos_cap_v2), beta_start,
// beta_end, prediction_type (epsilon | v_prediction | sample), timestep_spacing
// (leading | trailing | linspace; DDIM's default is leading, the others'
// linspace), steps_offset, use_karras_sigmas, set_alpha_to_one, clip_sample
// (only false; absent is taken as false, although DDIM's default is true),
// final_sigmas_type, lower_order_final, euler_at_final, shift (flow_shift
// when shift is absent), use_flow_sigmas, solver_order, solver_type,
// predict_x0, disable_corrector, original_inference_steps, timestep_scaling. A field whose value changes the schedule in a way
// kiln does not implement (thresholding, rescale_betas_zero_snr,
// use_dynamic_shifting, interpolation_type log_linear, ...) is refused by
// name; fields kiln does not know are ignored, as diffusers' from_config does.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/denoise_update.h"

namespace kiln {

// kind, name, diffusers class
#define KILN_SCHEDULER_KINDS(X)                                  \
  X(kDdim, "ddim", "DDIMScheduler")                              \
  X(kEuler, "euler", "EulerDiscreteScheduler")                   \
  X(kEulerAncestral, "euler_a", "EulerAncestralDiscreteScheduler") \
  X(kDpmpp2m, "dpmpp_2m", "DPMSolverMultistepScheduler")         \
  X(kFlowEuler, "flow_euler", "FlowMatchEulerDiscreteScheduler") \
  X(kUniPc, "unipc", "UniPCMultistepScheduler")                  \
  X(kLcm, "lcm", "LCMScheduler")

enum class SchedulerKind {
#define KILN_SCHEDULER_ENUM(kind, name, cls) kind,
  KILN_SCHEDULER_KINDS(KILN_SCHEDULER_ENUM)
#undef KILN_SCHEDULER_ENUM
};

// "ddim", "euler", ...; the error lists the valid names.
Result<SchedulerKind> parse_scheduler_kind(std::string_view name);
const char* scheduler_kind_name(SchedulerKind kind);
// The diffusers class a kind follows ("DDIMScheduler", ...).
const char* scheduler_kind_class(SchedulerKind kind);

enum class BetaSchedule { kLinear, kScaledLinear, kSquaredCosCapV2 };
enum class PredictionType { kEpsilon, kVPrediction, kSample, kFlow };  // kFlow: "flow_prediction"
// Which of the training timesteps a run of n steps visits. SD's "leading"
// starts one interval short of the end (t = 951 of 999 for 20 steps);
// "trailing" starts at the last one (999), what few-step models need.
enum class TimestepSpacing { kLeading, kTrailing, kLinspace };
enum class FinalSigmas { kZero, kSigmaMin };

// "leading", "trailing" or "linspace" (timestep_spacing's values); the error lists them.
Result<TimestepSpacing> parse_timestep_spacing(std::string_view name);
const char* timestep_spacing_name(TimestepSpacing spacing);

struct SchedulerConfig {
  std::string class_name;  // "_class_name"; empty when absent
  int num_train_timesteps = 1000;
  BetaSchedule beta_schedule = BetaSchedule::kLinear;
  double beta_start = 0.0001, beta_end = 0.02;
  PredictionType prediction_type = PredictionType::kEpsilon;
  std::optional<TimestepSpacing> timestep_spacing;  // absent: the scheduler's own default
  int steps_offset = 0;
  bool use_karras_sigmas = false;
  bool set_alpha_to_one = true;  // DDIM
  bool clip_sample = false;      // DDIM; true is refused by make_step_tables
  FinalSigmas final_sigmas_type = FinalSigmas::kZero;  // euler, dpmpp_2m
  bool lower_order_final = true, euler_at_final = false;  // dpmpp_2m
  double shift = 1.0;  // flow_euler, unipc
  bool use_flow_sigmas = false;   // unipc: only true (flow models)
  int solver_order = 2;           // unipc: 1 or 2
  bool predict_x0 = true;         // unipc: only true
  int original_inference_steps = 50;  // lcm: the distillation's timestep grid (1000 / 50: every 20th)
  double timestep_scaling = 10.0;     // lcm: the boundary condition's time scale
};

// Wan2.2's scheduler (its diffusers folder's scheduler_config.json, which
// Wan's own folder lacks): UniPC for flow prediction, shift 5.
SchedulerConfig wan_scheduler_config();

// Parses scheduler_config.json's text (Python's -Infinity/Infinity/NaN
// allowed, as json.dump writes them). Errors name the field and value.
Result<SchedulerConfig> scheduler_config_from_json(std::string_view json_text);
// Errors name the file.
Result<SchedulerConfig> load_scheduler_config(const std::string& path);

// The kind that follows `class_name`; NotFound for a class kiln does not implement.
Result<SchedulerKind> scheduler_kind_for_class(std::string_view class_name);
// The kind for a config with no scheduler asked for: the one its class names;
// for a class kiln does not implement (PNDMScheduler, SD 1.x's default;
// LMSDiscreteScheduler, ...) "euler", or "flow_euler" for a flow-matching
// class, with *substituted set so the caller can say so.
SchedulerKind default_scheduler_kind(const SchedulerConfig& config, bool* substituted = nullptr);
// The spacing a diffusers scheduler class uses when its config names none:
// leading for DDIMScheduler, PNDMScheduler and DDPMScheduler, linspace for
// the rest. A kind substituted for a class kiln does not implement (SD 1.5's
// PNDM) visits the timesteps that class would.
TimestepSpacing default_timestep_spacing(std::string_view class_name);

struct StepTables {
  SchedulerKind kind = SchedulerKind::kEuler;
  // One entry a step.
  std::vector<float> timestep, in_scale, d_x, d_out, c_x, c_out, c_prev, c_noise;
  float init_noise_sigma = 1.0f;  // the initial latents are standard noise times this
  // Image to image: the tables are the schedule's steps from `first_step` on,
  // started from x = image_scale * x0 + image_noise_scale * noise (diffusers'
  // add_noise at that step's noise level).
  int first_step = 0;
  float image_scale = 0, image_noise_scale = 0;
  // Reporting: steps + 1 noise levels, the last one where the loop ends. For
  // ddim and lcm sqrt((1 - alpha_cumprod) / alpha_cumprod) at each timestep
  // and the final alpha; for flow_euler the flow sigma.
  std::vector<double> sigmas;
  bool needs_noise = false;  // every step takes noise_i (euler_a, lcm), even where c_noise is 0
  bool needs_prev = false;   // steps read denoised_{i-1} (dpmpp_2m)
  // unipc: each step's update (the form above does not hold it); empty for the others.
  std::vector<UniPcCoefficients> unipc;

  int steps() const { return static_cast<int>(timestep.size()); }
};

// steps in [1, num_train_timesteps]; with first_step > 0 (image to image),
// only the rows from it on (for dpmpp_2m it is first-order, its multistep
// history empty). Refuses combinations diffusers would run into nonsense (a
// timestep outside the training range, a trailing spacing whose numpy arange
// yields an extra timestep, repeated sigmas).
Result<StepTables> make_step_tables(SchedulerKind kind, const SchedulerConfig& config, int steps,
                                    int first_step = 0);

// Where image to image starts with `strength` in [0, 1], as diffusers'
// img2img pipelines: min(int(steps * strength), steps) steps are run, the
// first ones skipped. steps when strength leaves no step to run.
int image_to_image_first_step(int steps, double strength);

// Step i's row, as kiln.DenoiseStep's coefficient table holds it.
DenoiseCoefficients step_coefficients(const StepTables& tables, int i);

// One step over n floats: x_next = the update; denoised_prev_inout, when not
// null, is read as denoised_{i-1} and overwritten with this step's x0
// estimate (it may be null when !needs_prev; its content is not read at step
// 0). noise may be null when !needs_noise. x_next may alias x.
void scheduler_step(const StepTables& tables, int i, const float* x, const float* model_output,
                    float* denoised_prev_inout, const float* noise, float* x_next, size_t n);

// A unipc step over its state (kernels/denoise_update.h): the corrected
// sample and the last two x0 estimates, all zeros before step 0, updated in
// place; x_next may alias x.
void unipc_step(const StepTables& tables, int i, const float* x, const float* model_output, float* corrected,
                float* x0_last, float* x0_older, float* x_next, size_t n);

}  // namespace kiln
