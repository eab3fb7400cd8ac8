#!/usr/bin/env python3
"""diffusers' schedulers reimplemented in numpy: the oracle for kiln's
per-step coefficient tables (src/pipeline/scheduler.h).

Each class follows its diffusers namesake the way diffusers runs it:
set_timesteps() builds timesteps and sigmas with the same numpy/float32
steps, step() applies the update to arrays, add_noise() starts image to
image at a step. Nothing here uses kiln's
coefficient form, so the C++ test compares two independent formulations.

    sched = make("euler", json.load(open("scheduler_config.json")))
    sched.set_timesteps(20)
    x = noise * sched.init_noise_sigma
    for i, t in enumerate(sched.timesteps):
        out = model(x * sched.input_scale(i), float(t))
        x = sched.step(out, i, x, fresh_noise if sched.needs_noise else None)

    kind          diffusers class
    ddim          DDIMScheduler (eta = 0)
    euler         EulerDiscreteScheduler
    euler_a       EulerAncestralDiscreteScheduler
    dpmpp_2m      DPMSolverMultistepScheduler (dpmsolver++, order 2, midpoint)
    flow_euler    FlowMatchEulerDiscreteScheduler
    lcm           LCMScheduler (no image to image)

Precision. diffusers keeps the schedule's arrays in float32 (betas,
alphas_cumprod, sigmas, Euler's timesteps) and so does this module, rounding
exactly where diffusers does. Where it differs, on purpose:
  - betas: torch.linspace's vectorized float32 kernel rounds some entries one
    ulp differently from float64 linspace rounded to float32, which is used
    here; alphas_cumprod then agree with torch's to 5e-7 relative.
  - log_sigmas (Karras timesteps): numpy's float32 log may be an ulp off;
    the correctly rounded float32 log is used, and _sigma_to_t's arithmetic
    follows numpy 2's promotion rules whatever numpy runs this.
  - step(): the per-step scalars (sqrt(alpha), lambda, h, ...) and the update
    are computed in float64 from the float32 schedule, where diffusers uses
    float32 tensors; the result is returned in float64.
kiln's own choices, shared with the C++ side: clip_sample absent means false
(diffusers' DDIM default is true, which kiln does not implement); trailing
spacing at a step count where numpy's arange yields an extra timestep is
refused; options no kiln scheduler implements are refused (UNSUPPORTED).

CLI: write the reference cases tests/pipeline/scheduler_test.cc replays:
    /usr/bin/python3 tools/scheduler_ref.py make-test-data tests/data/schedulers
    /usr/bin/python3 tools/scheduler_ref.py show CONFIG.json KIND STEPS
"""
import argparse
import json
import math
import os
import sys

import numpy as np

F32 = np.float32

KINDS = {
    "ddim": "DDIMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "dpmpp_2m": "DPMSolverMultistepScheduler",
    "flow_euler": "FlowMatchEulerDiscreteScheduler",
    "lcm": "LCMScheduler",
}

# Fields whose non-default value no kiln scheduler implements: field -> default.
UNSUPPORTED = {
    "thresholding": False, "rescale_betas_zero_snr": False, "use_dynamic_shifting": False,
    "use_exponential_sigmas": False, "use_beta_sigmas": False, "use_lu_lambdas": False,
    "stochastic_sampling": False, "invert_sigmas": False, "shift_terminal": None, "timestep_type": "discrete",
    "interpolation_type": "linear", "trained_betas": None, "sigma_min": None, "sigma_max": None, "rho": 7.0,
    "lambda_min_clipped": -math.inf,
}

_NOISE_DEFAULTS = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
                   "prediction_type": "epsilon", "steps_offset": 0, "clip_sample": False}
DEFAULTS = {
    "ddim": dict(_NOISE_DEFAULTS, timestep_spacing="leading", set_alpha_to_one=True),
    "euler": dict(_NOISE_DEFAULTS, timestep_spacing="linspace", use_karras_sigmas=False, final_sigmas_type="zero"),
    "euler_a": dict(_NOISE_DEFAULTS, timestep_spacing="linspace"),
    "dpmpp_2m": dict(_NOISE_DEFAULTS, timestep_spacing="linspace", use_karras_sigmas=False, final_sigmas_type="zero",
                     lower_order_final=True, euler_at_final=False),
    "flow_euler": {"num_train_timesteps": 1000, "shift": 1.0, "use_karras_sigmas": False},
    "lcm": dict(_NOISE_DEFAULTS, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                original_inference_steps=50, set_alpha_to_one=True, timestep_scaling=10.0),
}


def resolve_config(kind, config):
    """The config diffusers' from_config would give `kind`: the file's fields
    over the class's defaults; refuses what kiln does not implement."""
    if kind not in KINDS:
        raise ValueError(f"unknown scheduler '{kind}' (valid: {', '.join(KINDS)})")
    for field, default in UNSUPPORTED.items():
        value = config.get(field, default)
        if value is not None and value != default:
            raise NotImplementedError(f"{field} = {value!r} is not supported")
    if config.get("variance_type") in ("learned", "learned_range"):
        raise NotImplementedError(f"variance_type = {config['variance_type']!r} is not supported")
    c = dict(DEFAULTS[kind])
    c.update({k: v for k, v in config.items() if k in c})
    if kind == "flow_euler" and "shift" not in config and "flow_shift" in config:
        c["shift"] = config["flow_shift"]
    checks = {"beta_schedule": ("linear", "scaled_linear", "squaredcos_cap_v2"),
              "prediction_type": ("epsilon", "v_prediction", "sample"),
              "timestep_spacing": ("leading", "trailing", "linspace"),
              "final_sigmas_type": ("zero", "sigma_min")}
    for field, valid in checks.items():
        if field in c and c[field] not in valid:
            raise ValueError(f"{field} '{c[field]}' is not one of {', '.join(valid)}")
    if c.get("clip_sample"):
        raise NotImplementedError("clip_sample = true is not supported")
    if kind == "flow_euler" and c["use_karras_sigmas"]:
        raise NotImplementedError("use_karras_sigmas with flow_euler is not supported")
    return c


# -- the schedule every noise-prediction scheduler shares ------------------

def betas_for_alpha_bar(n, max_beta=0.999):
    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), max_beta) for i in range(n)], dtype=F32)


def alphas_cumprod(c):
    n = c["num_train_timesteps"]
    if c["beta_schedule"] == "linear":
        betas = np.linspace(c["beta_start"], c["beta_end"], n).astype(F32)
    elif c["beta_schedule"] == "scaled_linear":
        betas = np.linspace(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, n).astype(F32) ** 2
    else:
        betas = betas_for_alpha_bar(n)
    alphas = F32(1.0) - betas
    # torch.cumprod on the CPU accumulates float32 in double, rounding each output.
    return np.cumprod(alphas.astype(np.float64)).astype(F32)


def trailing_arange(start, n, steps):
    """np.arange(start, 0, -n / steps).round(), refusing the step counts where
    arange's length rounding adds a timestep (diffusers would then step to -1)."""
    t = np.arange(start, 0, -n / steps).round()
    if len(t) != steps:
        raise ValueError(f"timestep_spacing 'trailing' with {steps} steps gives {len(t)} timesteps")
    return t


def karras(sigma_min, sigma_max, steps, rho=7.0):
    ramp = np.linspace(0, 1, steps)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    return (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho


def sigma_to_t(sigma, log_sigmas):
    """diffusers' _sigma_to_t with numpy 2's promotion rules spelled out: the
    float64 log sigma against float32 log_sigmas in float64, their neighbours'
    difference in float32 (numpy 1.x would do all of it in float32)."""
    log_sigma = np.log(np.maximum(np.float64(sigma), 1e-10))
    dists = log_sigma - log_sigmas.astype(np.float64)[:, np.newaxis]
    low_idx = np.cumsum((dists >= 0), axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
    high_idx = low_idx + 1
    low, high = log_sigmas[low_idx], log_sigmas[high_idx]
    w = np.clip((low.astype(np.float64) - log_sigma) / (low - high).astype(np.float64), 0, 1)
    t = (1 - w) * low_idx + w * high_idx
    return t.reshape(np.shape(sigma))


def train_sigmas(ac):
    return np.sqrt((F32(1) - ac) / ac)  # float32, as diffusers' ((1 - ac) / ac) ** 0.5


def correct_log(x32):
    return np.log(x32.astype(np.float64)).astype(F32)


def x0_from(prediction_type, sample, model_output, alpha, sigma):
    """x0 for sample = alpha x0 + sigma eps (DDIM's and DPM-Solver's variables)."""
    if prediction_type == "epsilon":
        return (sample - sigma * model_output) / alpha
    if prediction_type == "v_prediction":
        return alpha * sample - sigma * model_output
    return model_output


class Scheduler:
    needs_noise = False

    def __init__(self, kind, config):
        self.kind = kind
        self.config = resolve_config(kind, config)
        self.pred_original_sample = None

    def input_scale(self, i):
        return 1.0

    @property
    def init_noise_sigma(self):
        return 1.0

    def check_steps(self, steps):
        n = self.config["num_train_timesteps"]
        if not 1 <= steps <= n:
            raise ValueError(f"steps {steps} is outside [1, {n}]")


class NoiseScheduler(Scheduler):
    """A scheduler over the beta schedule's alphas_cumprod."""

    def __init__(self, kind, config):
        super().__init__(kind, config)
        self.ac = alphas_cumprod(self.config)
        self.train_sigmas = train_sigmas(self.ac)


class AlphaScheduler(NoiseScheduler):
    """DDIM's and LCM's: steps between alphas_cumprod entries, ending at the
    final alpha (1 with set_alpha_to_one)."""

    def __init__(self, kind, config):
        super().__init__(kind, config)
        self.final_alpha_cumprod = F32(1.0) if self.config["set_alpha_to_one"] else self.ac[0]

    @property
    def sigmas(self):
        a = [float(self.ac[t]) for t in self.timesteps] + [float(self.final_alpha_cumprod)]
        return np.array([math.sqrt((1 - x) / x) for x in a])


class DDIM(AlphaScheduler):
    def __init__(self, config):
        super().__init__("ddim", config)

    def set_timesteps(self, steps):
        self.check_steps(steps)
        c, n = self.config, self.config["num_train_timesteps"]
        self.num_inference_steps = steps
        if c["timestep_spacing"] == "linspace":
            t = np.linspace(0, n - 1, steps).round()[::-1].copy().astype(np.int64)
        elif c["timestep_spacing"] == "leading":
            ratio = n // steps
            t = (np.arange(0, steps) * ratio).round()[::-1].copy().astype(np.int64)
            t += c["steps_offset"]
        else:
            t = trailing_arange(n, n, steps).astype(np.int64) - 1
        if t.min() < 0 or t.max() >= n:
            raise ValueError(f"timesteps {t.min()}..{t.max()} leave [0, {n})")
        self.timesteps = t

    def _alpha_prev(self, i):
        prev = self.timesteps[i] - self.config["num_train_timesteps"] // self.num_inference_steps
        return float(self.ac[prev] if prev >= 0 else self.final_alpha_cumprod)

    def step(self, model_output, i, sample, noise=None):
        out, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        a = float(self.ac[self.timesteps[i]])
        a_prev = self._alpha_prev(i)
        b = 1 - a
        p = self.config["prediction_type"]
        if p == "epsilon":
            x0 = (x - b ** 0.5 * out) / a ** 0.5
            eps = out
        elif p == "sample":
            x0 = out
            eps = (x - a ** 0.5 * x0) / b ** 0.5
        else:
            x0 = a ** 0.5 * x - b ** 0.5 * out
            eps = a ** 0.5 * out + b ** 0.5 * x
        self.pred_original_sample = x0
        return a_prev ** 0.5 * x0 + (1 - a_prev) ** 0.5 * eps  # eta = 0: no variance term

    def add_noise(self, x0, noise, i):
        """Image to image's start at step i: diffusers' add_noise at timesteps[i]."""
        a = float(self.ac[self.timesteps[i]])
        return a ** 0.5 * np.asarray(x0, np.float64) + (1 - a) ** 0.5 * np.asarray(noise, np.float64)


class Euler(NoiseScheduler):
    """EulerDiscreteScheduler; EulerAncestral shares its schedule."""

    def __init__(self, config, kind="euler"):
        super().__init__(kind, config)

    def set_timesteps(self, steps):
        self.check_steps(steps)
        c, n = self.config, self.config["num_train_timesteps"]
        if c["timestep_spacing"] == "linspace":
            t = np.linspace(0, n - 1, steps, dtype=F32)[::-1].copy()
        elif c["timestep_spacing"] == "leading":
            ratio = n // steps
            t = (np.arange(0, steps) * ratio).round()[::-1].copy().astype(F32)
            t += c["steps_offset"]
        else:
            t = trailing_arange(n, n, steps).astype(F32)
            t -= 1
        sigmas = np.interp(t, np.arange(0, n), self.train_sigmas)
        if c.get("use_karras_sigmas"):
            sigmas = karras(sigmas[-1].item(), sigmas[0].item(), steps)
            log_sigmas = correct_log(self.train_sigmas)
            t = np.array([sigma_to_t(s, log_sigmas) for s in sigmas])
        last = self.train_sigmas[0] if c.get("final_sigmas_type") == "sigma_min" else 0.0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = t.astype(F32)

    @property
    def init_noise_sigma(self):
        m = self.sigmas.max()
        if self.config["timestep_spacing"] in ("linspace", "trailing"):
            return float(m)
        return float(np.sqrt(m * m + F32(1)))

    def input_scale(self, i):
        s = float(self.sigmas[i])
        return 1.0 / math.sqrt(s * s + 1)

    def add_noise(self, x0, noise, i):
        return np.asarray(x0, np.float64) + float(self.sigmas[i]) * np.asarray(noise, np.float64)

    def _x0(self, out, x, sigma):
        p = self.config["prediction_type"]
        if p == "epsilon":
            return x - sigma * out
        if p == "v_prediction":
            return out * (-sigma / (sigma ** 2 + 1) ** 0.5) + x / (sigma ** 2 + 1)
        return out

    def step(self, model_output, i, sample, noise=None):
        out, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        x0 = self._x0(out, x, sigma)  # s_churn = 0: sigma_hat = sigma
        self.pred_original_sample = x0
        derivative = (x - x0) / sigma
        return x + derivative * (sigma_next - sigma)


class EulerAncestral(Euler):
    needs_noise = True

    def __init__(self, config):
        super().__init__(config, kind="euler_a")
        if self.config["prediction_type"] == "sample":
            raise NotImplementedError("prediction_type 'sample' is not implemented by EulerAncestralDiscreteScheduler")

    def step(self, model_output, i, sample, noise=None):
        out, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        sigma_from, sigma_to = float(self.sigmas[i]), float(self.sigmas[i + 1])
        x0 = self._x0(out, x, sigma_from)
        self.pred_original_sample = x0
        sigma_up = (sigma_to ** 2 * (sigma_from ** 2 - sigma_to ** 2) / sigma_from ** 2) ** 0.5
        sigma_down = (sigma_to ** 2 - sigma_up ** 2) ** 0.5
        derivative = (x - x0) / sigma_from
        prev = x + derivative * (sigma_down - sigma_from)
        return prev + np.asarray(noise, np.float64) * sigma_up


class DPMSolverPP2M(NoiseScheduler):
    def __init__(self, config):
        super().__init__("dpmpp_2m", config)

    def set_timesteps(self, steps):
        self.check_steps(steps)
        c, n = self.config, self.config["num_train_timesteps"]
        last_timestep = n  # lambda_min_clipped = -inf clips nothing
        if c["timestep_spacing"] == "linspace":
            t = np.linspace(0, last_timestep - 1, steps + 1).round()[::-1][:-1].copy().astype(np.int64)
        elif c["timestep_spacing"] == "leading":
            ratio = last_timestep // (steps + 1)
            t = (np.arange(0, steps + 1) * ratio).round()[::-1][:-1].copy().astype(np.int64)
            t += c["steps_offset"]
        else:
            t = trailing_arange(last_timestep, n, steps).astype(np.int64) - 1
        if c["use_karras_sigmas"]:
            flipped = np.flip(self.train_sigmas).copy()
            sigmas = karras(flipped[-1].item(), flipped[0].item(), steps)
            log_sigmas = correct_log(self.train_sigmas)
            t = np.array([sigma_to_t(s, log_sigmas) for s in sigmas]).round()
        else:
            sigmas = np.interp(t, np.arange(0, n), self.train_sigmas)
        last = self.train_sigmas[0] if c["final_sigmas_type"] == "sigma_min" else 0.0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = t.astype(np.int64)
        self.model_outputs = [None, None]
        self.lower_order_nums = 0

    @staticmethod
    def _alpha_sigma(sigma):
        alpha = 1 / (sigma ** 2 + 1) ** 0.5
        return alpha, sigma * alpha

    def add_noise(self, x0, noise, i):
        alpha, sigma = self._alpha_sigma(float(self.sigmas[i]))
        return alpha * np.asarray(x0, np.float64) + sigma * np.asarray(noise, np.float64)

    def step(self, model_output, i, sample, noise=None):
        out, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        c, n = self.config, len(self.timesteps)
        lower_order_final = i == n - 1 and (c["euler_at_final"] or (c["lower_order_final"] and n < 15)
                                            or c["final_sigmas_type"] == "zero")
        alpha_s0, sigma_s0 = self._alpha_sigma(float(self.sigmas[i]))
        x0 = x0_from(c["prediction_type"], x, out, alpha_s0, sigma_s0)
        self.pred_original_sample = x0
        self.model_outputs = [self.model_outputs[1], x0]

        alpha_t, sigma_t = self._alpha_sigma(float(self.sigmas[i + 1]))
        with np.errstate(divide="ignore"):  # sigma_t = 0 at the end: lambda_t = inf, as torch.log gives
            lambda_t = np.log(alpha_t) - np.log(sigma_t)
        lambda_s0 = np.log(alpha_s0) - np.log(sigma_s0)
        h = lambda_t - lambda_s0
        if self.lower_order_nums < 1 or lower_order_final:
            prev = (sigma_t / sigma_s0) * x - (alpha_t * (np.exp(-h) - 1.0)) * x0
        else:
            alpha_s1, sigma_s1 = self._alpha_sigma(float(self.sigmas[i - 1]))
            lambda_s1 = np.log(alpha_s1) - np.log(sigma_s1)
            m0, m1 = self.model_outputs[1], self.model_outputs[0]
            r0 = (lambda_s0 - lambda_s1) / h
            d0, d1 = m0, (1.0 / r0) * (m0 - m1)
            prev = ((sigma_t / sigma_s0) * x - (alpha_t * (np.exp(-h) - 1.0)) * d0
                    - 0.5 * (alpha_t * (np.exp(-h) - 1.0)) * d1)
        self.lower_order_nums = min(self.lower_order_nums + 1, 2)
        return prev


class FlowMatchEuler(Scheduler):
    def __init__(self, config):
        super().__init__("flow_euler", config)
        n, shift = self.config["num_train_timesteps"], self.config["shift"]
        t = np.linspace(1, n, n, dtype=F32)[::-1].copy()
        s = t / F32(n)
        s = F32(shift) * s / (F32(1) + F32(shift - 1) * s)  # torch float32 ops, scalars cast to float32
        self.sigma_min, self.sigma_max = float(s[-1]), float(s[0])

    def set_timesteps(self, steps):
        self.check_steps(steps)
        n, shift = self.config["num_train_timesteps"], self.config["shift"]
        t = np.linspace(self.sigma_max * n, self.sigma_min * n, steps)
        s = t / n
        s = (shift * s / (1 + (shift - 1) * s)).astype(F32)  # the endpoint is shifted twice, as diffusers does
        self.timesteps = s * F32(n)
        self.sigmas = np.concatenate([s, [F32(0)]]).astype(F32)

    def add_noise(self, x0, noise, i):
        sigma = float(self.sigmas[i])
        return (1 - sigma) * np.asarray(x0, np.float64) + sigma * np.asarray(noise, np.float64)

    def step(self, model_output, i, sample, noise=None):
        v, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        self.pred_original_sample = x - sigma * v  # kiln's x0 estimate; diffusers returns none
        return x + (sigma_next - sigma) * v


class LCM(AlphaScheduler):
    """LCMScheduler: consistency estimates on the distillation's timestep
    grid, renoised to the next timestep with fresh noise."""
    needs_noise = True

    def __init__(self, config):
        super().__init__("lcm", config)

    def set_timesteps(self, steps):
        self.check_steps(steps)
        c, n = self.config, self.config["num_train_timesteps"]
        original = c["original_inference_steps"]
        if original > n or steps > original:
            raise ValueError(f"{steps} steps on an original schedule of {original} (of {n})")
        k = n // original
        grid = (np.asarray(list(range(1, original + 1))) * k - 1)[::-1].copy()
        indices = np.floor(np.linspace(0, len(grid), num=steps, endpoint=False)).astype(np.int64)
        self.timesteps = grid[indices]

    def step(self, model_output, i, sample, noise=None):
        out, x = np.asarray(model_output, np.float64), np.asarray(sample, np.float64)
        t = int(self.timesteps[i])
        last = i + 1 == len(self.timesteps)
        a = float(self.ac[t])
        a_prev = a if last else float(self.ac[int(self.timesteps[i + 1])])
        b = 1 - a
        scaled = t * self.config["timestep_scaling"]
        c_skip = 0.5 ** 2 / (scaled ** 2 + 0.5 ** 2)
        c_out = scaled / (scaled ** 2 + 0.5 ** 2) ** 0.5
        p = self.config["prediction_type"]
        if p == "epsilon":
            x0 = (x - b ** 0.5 * out) / a ** 0.5
        elif p == "sample":
            x0 = out
        else:
            x0 = a ** 0.5 * x - b ** 0.5 * out
        self.pred_original_sample = x0
        denoised = c_out * x0 + c_skip * x
        if last:
            return denoised
        return a_prev ** 0.5 * denoised + (1 - a_prev) ** 0.5 * np.asarray(noise, np.float64)


CLASSES = {"ddim": DDIM, "euler": Euler, "euler_a": EulerAncestral, "dpmpp_2m": DPMSolverPP2M,
           "flow_euler": FlowMatchEuler, "lcm": LCM}


def make(kind, config):
    if kind not in CLASSES:
        raise ValueError(f"unknown scheduler '{kind}' (valid: {', '.join(CLASSES)})")
    return CLASSES[kind](config)


# -- reference data ---------------------------------------------------------

SD15 = {"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
        "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
        "trained_betas": None, "clip_sample": False}
NOISE_KINDS = ("ddim", "euler", "euler_a", "dpmpp_2m")
# (file name, config, schedulers)
TEST_CONFIGS = [
    ("sd15", SD15, NOISE_KINDS),
    ("sd2_v", dict(SD15, _class_name="DDIMScheduler", prediction_type="v_prediction"), NOISE_KINDS),
    ("trailing", dict(SD15, _class_name="EulerDiscreteScheduler", timestep_spacing="trailing", steps_offset=0),
     NOISE_KINDS),
    # diffusers' defaults: linear 0.0001..0.02, epsilon, DDIM's set_alpha_to_one true.
    ("linspace_defaults", {"_class_name": "EulerAncestralDiscreteScheduler", "timestep_spacing": "linspace"},
     NOISE_KINDS),
    ("cosine_sample", {"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "squaredcos_cap_v2",
                       "prediction_type": "sample", "timestep_spacing": "leading", "final_sigmas_type": "sigma_min",
                       "lambda_min_clipped": -math.inf, "algorithm_type": "dpmsolver++", "solver_order": 2},
     ("ddim", "euler", "dpmpp_2m")),
    ("karras", dict(SD15, _class_name="DPMSolverMultistepScheduler", use_karras_sigmas=True), ("euler", "dpmpp_2m")),
    ("flow_shift1", {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0},
     ("flow_euler",)),
    ("flow_shift3", {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0},
     ("flow_euler",)),
    # LCM-Dreamshaper-v7's scheduler_config.json (its defaults spelled out), and v-prediction on a
    # shorter distillation grid whose timesteps fall between a whole stride (1000 / 30).
    ("lcm", {"_class_name": "LCMScheduler", "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
             "num_train_timesteps": 1000, "original_inference_steps": 50, "set_alpha_to_one": True, "steps_offset": 1,
             "clip_sample": False, "prediction_type": "epsilon", "timestep_scaling": 10.0}, ("lcm",)),
    ("lcm_v_30", {"_class_name": "LCMScheduler", "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                  "beta_end": 0.012, "original_inference_steps": 30, "prediction_type": "v_prediction"}, ("lcm",)),
]
NO_IMAGE_TO_IMAGE = ("lcm",)  # kinds kiln runs from noise only
TEST_STEPS = (1, 4, 7, 20)
TEST_SIZE = 8  # floats in the test tensors


def fake_model(model_input, i):
    """The deterministic stand-in for a network the C++ test reproduces:
    out = 0.3 model_input + 0.1 sin(i + k), in float64, rounded to float32."""
    k = np.arange(len(model_input), dtype=np.float64)
    return (0.3 * model_input.astype(np.float64) + 0.1 * np.sin(i + k)).astype(F32)


def run_case(kind, config, steps, seed, first_step=0):
    """One trajectory as a pipeline runs it: float32 latents between steps.
    With first_step > 0, image to image: from add_noise(image, noise) at that step."""
    sched = make(kind, config)
    sched.set_timesteps(steps)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(TEST_SIZE) * sched.init_noise_sigma).astype(F32)
    case = {"scheduler": kind, "steps": steps, "timesteps": [float(t) for t in sched.timesteps[first_step:]],
            "sigmas": [float(s) for s in sched.sigmas[first_step:]],
            "init_noise_sigma": float(F32(sched.init_noise_sigma)), "x_start": None, "noise": [], "x": [],
            "denoised": []}
    if first_step:
        image, start_noise = rng.standard_normal(TEST_SIZE).astype(F32), rng.standard_normal(TEST_SIZE).astype(F32)
        x = sched.add_noise(image, start_noise, first_step).astype(F32)
        case.update(first_step=first_step, image=image.tolist(), start_noise=start_noise.tolist())
    case["x_start"] = x.tolist()
    for i in range(first_step, len(sched.timesteps)):
        model_input = (x.astype(np.float64) * sched.input_scale(i)).astype(F32)
        out = fake_model(model_input, i)
        noise = None
        if sched.needs_noise:
            noise = rng.standard_normal(TEST_SIZE).astype(F32)
            case["noise"].append(noise.tolist())
        x = sched.step(out, i, x, noise).astype(F32)
        case["x"].append(x.tolist())
        case["denoised"].append(sched.pred_original_sample.tolist())
    if not case["noise"]:
        del case["noise"]
    return case


def rounded(obj):
    """Nine significant digits: float32 values survive exactly, float64 ones to 5e-10."""
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    if isinstance(obj, list):
        return [rounded(v) for v in obj]
    if isinstance(obj, dict):
        return {k: rounded(v) for k, v in obj.items()}
    return obj


def make_test_data(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for seed, (name, config, kinds) in enumerate(TEST_CONFIGS):
        runs = [(k, s, 0) for k in kinds for s in TEST_STEPS]
        runs += [(k, 20, 8) for k in kinds if k not in NO_IMAGE_TO_IMAGE]  # then image to image
        cases = [rounded(run_case(kind, config, steps, seed * 100 + j, first_step))
                 for j, (kind, steps, first_step) in enumerate(runs)]
        # One case a line: small diffs when a formula changes.
        # The config as scheduler_config.json's text: Python's json writes -inf as -Infinity.
        text = ('{"config_json": ' + json.dumps(json.dumps(config, sort_keys=True)) + ',\n "cases": [\n' +
                ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]}\n")
        path = os.path.join(out_dir, name + ".json")
        with open(path, "w") as f:
            f.write(text)
        total += len(text)
        print(f"   {path}: {len(cases)} cases, {len(text)} bytes")
    print(f"   {total} bytes in all")


def show(config_path, kind, steps):
    with open(config_path) as f:
        sched = make(kind, json.load(f))
    sched.set_timesteps(steps)
    print(f"init_noise_sigma {sched.init_noise_sigma:.9g}")
    for i, t in enumerate(sched.timesteps):
        print(f"{i:4d}  t {float(t):12.6f}  sigma {float(sched.sigmas[i]):.9g}  input_scale {sched.input_scale(i):.9g}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make-test-data", help="write the reference cases (JSON) to a folder")
    p.add_argument("out_dir")
    p = sub.add_parser("show", help="print a schedule")
    p.add_argument("config")
    p.add_argument("kind", choices=list(CLASSES))
    p.add_argument("steps", type=int)
    args = parser.parse_args()
    if args.command == "make-test-data":
        make_test_data(args.out_dir)
    else:
        show(args.config, args.kind, args.steps)


if __name__ == "__main__":
    sys.exit(main())
