"""Flow-matching samplers for Wan in numpy float64: the oracle for kiln's
UniPC and Euler tables.

    s = sigmas(50, 5.0)              # float32 [51], last 0 (diffusers' table)
    t = timesteps(50, 5.0)           # int64 [50], what the transformer is given
    sampler = UniPC(50, 5.0)         # or Euler(50, 5.0)
    x = sampler.step(v, x)           # once per step, v the (guided) velocity
    traj = run(x_T, vs, "unipc", 5.0)   # [N, ...] samples after each step

The schedule is diffusers' UniPCMultistepScheduler(use_flow_sigmas=True,
flow_shift=shift, num_train_timesteps=1000, final_sigmas_type="zero") as of
the fact sheet's snapshot: sigma = linspace(1, 1/1000, N+1)[:-1], shifted
s*sigma/(1+(s-1)*sigma) in float64, the first nudged to 1-1e-6 when within
1e-6 of 1 (it is exactly 1 after the shift), timesteps = int64(sigma*1000)
(truncated) from the float64 values, then sigmas stored float32 with a
final 0. (Older diffusers flipped a 0..0.999 grid instead, which gives
[W]'s schedule: shift(0.999 k/N), k = N..1.)

Flow convention: x_sigma = (1 - sigma) x0 + sigma noise; the model gives
v, and x0 = x - sigma v. Steps run in float64 on the float32 sigmas, as
tools/scheduler_ref.py does for the other schedulers.

UniPC (bh2, solver_order 2, predict_x0, lower_order_final): with
alpha = 1 - sigma, lambda = ln alpha - ln sigma, at step i from s = sigma_i
to t = sigma_{i+1}, h = lambda_t - lambda_s, m_i the x0 prediction:
  corrector (i > 0), order p of the previous predictor, on the sample x_i the
  model saw, from x_{i-1} (the sample before the previous predictor):
    x_i <- sigma_i/sigma_{i-1} x_{i-1} - alpha_i (e^-h - 1) m_{i-1}
           - alpha_i B(h) (sum_k rho_k D_k + rho_p (m_i - m_{i-1}))
  predictor of order p = min(2, N - i, i + 1):
    x_{i+1} = sigma_t/sigma_s x_i - alpha_t (e^-h - 1) m_i - alpha_t B(h) rho D_1
  with B(h) = e^-h - 1, D_1 = (m_{i-1} - m_i)/r_1, r_1 = (lambda_{i-1} - lambda_i)/h,
  rho = 1/2 for the order-2 predictor and the order-1 corrector, else rho
  solving UniPC's order conditions R rho = b (see coefficients()).
The last step (t = 0: lambda = +inf, B = -1) gives exactly m_{N-1}.
"""
import math

import numpy as np

TRAIN_STEPS = 1000


def sigmas_f64(n, shift):
    s = np.linspace(1.0, 1.0 / TRAIN_STEPS, n + 1)[:-1]
    s = shift * s / (1 + (shift - 1) * s)
    if abs(s[0] - 1) < 1e-6:
        s[0] -= 1e-6
    return s


def sigmas(n, shift):
    """float32 [n + 1]: the schedule diffusers steps on, final 0 appended."""
    return np.concatenate([sigmas_f64(n, shift), [0.0]]).astype(np.float32)


def timesteps(n, shift):
    """int64 [n]: sigma * 1000 truncated (from the float64 sigmas)."""
    return (sigmas_f64(n, shift) * TRAIN_STEPS).astype(np.int64)


def lam(sigma):
    """lambda = ln(alpha) - ln(sigma); +inf at sigma = 0."""
    return math.inf if sigma == 0 else math.log(1 - sigma) - math.log(sigma)


def coefficients(h, rks):
    """b(h) of UniPC's B(h) form (bh2) and the rhos solving R rho = b for
    the ratios r_k (last one 1): returns (e^-h - 1, B(h), rhos)."""
    hh = -h
    h_phi_1 = math.expm1(hh)
    b_h = math.expm1(hh)
    h_phi_k, factorial, b = h_phi_1 / hh - 1, 1, []
    for i in range(1, len(rks) + 1):
        b.append(h_phi_k * factorial / b_h)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - 1 / factorial
    rmat = np.array([[r ** (i - 1) for r in rks] for i in range(1, len(rks) + 1)])
    return h_phi_1, b_h, rmat, np.array(b)


class UniPC:
    def __init__(self, n, shift, order=2):
        self.sig = sigmas(n, shift).astype(np.float64)
        self.n, self.solver_order = n, order
        self.i = 0
        self.ms = []          # x0 predictions, newest last
        self.last_sample = None
        self.last_order = None

    def step(self, v, x):
        i, sig = self.i, self.sig
        x = np.asarray(x, np.float64)
        m = x - sig[i] * np.asarray(v, np.float64)
        if i > 0:
            x = self.corrector(m, x)
        self.ms = (self.ms + [m])[-self.solver_order:]
        order = min(self.solver_order, self.n - i, i + 1)  # lower_order_final; warm-up
        self.last_sample, self.last_order = x, order
        x_next = self.predictor(x, order)
        self.i += 1
        return x_next

    def predictor(self, x, order):
        i, sig = self.i, self.sig
        s, t = sig[i], sig[i + 1]
        m0 = self.ms[-1]
        if t == 0:  # lambda_t = inf: e^-h - 1 = B(h) = -1, x_t = m0
            return m0.copy()
        h = lam(t) - lam(s)
        h_phi_1, b_h, _, _ = coefficients(h, [1.0] * order)
        x_t = t / s * x - (1 - t) * h_phi_1 * m0
        if order == 2:
            r1 = (lam(sig[i - 1]) - lam(s)) / h
            x_t = x_t - (1 - t) * b_h * 0.5 * (self.ms[-2] - m0) / r1
        return x_t

    def corrector(self, m_t, x_t):
        """UniC on the sample the model just saw (x_t, at sigma_i), from the
        sample before the last predictor and its x0 predictions."""
        i, sig, order = self.i, self.sig, self.last_order
        s, t = sig[i - 1], sig[i]
        m0 = self.ms[-1]
        h = lam(t) - lam(s)
        x = self.last_sample
        if order == 1:
            h_phi_1, b_h, _, _ = coefficients(h, [1.0])
            rhos, d = [0.5], []
        else:
            r1 = (lam(sig[i - 2]) - lam(s)) / h
            h_phi_1, b_h, rmat, b = coefficients(h, [r1, 1.0])
            rhos = np.linalg.solve(rmat, b)
            d = [(self.ms[-2] - m0) / r1]
        res = sum(rho * dk for rho, dk in zip(rhos[:-1], d)) + rhos[-1] * (m_t - m0)
        return t / s * x - (1 - t) * h_phi_1 * m0 - (1 - t) * b_h * res


class Euler:
    """Flow Euler on the same table: x += (sigma_{i+1} - sigma_i) v."""

    def __init__(self, n, shift):
        self.sig = sigmas(n, shift).astype(np.float64)
        self.i = 0

    def step(self, v, x):
        x = np.asarray(x, np.float64) + (self.sig[self.i + 1] - self.sig[self.i]) * np.asarray(v, np.float64)
        self.i += 1
        return x


SAMPLERS = {"unipc": UniPC, "euler": Euler}


def run(x_T, model_outputs, scheduler, shift=5.0):
    """Samples after each step [N, ...] for fixed model outputs [N, ...]."""
    n = len(model_outputs)
    sampler = SAMPLERS[scheduler](n, shift)
    x, out = np.asarray(x_T, np.float64), []
    for v in model_outputs:
        x = sampler.step(v, x)
        out.append(x)
    return np.stack(out)
