"""Finite-difference curvature of any map: how far it bends away from an affine one.

For a map ``f`` and an input ``x`` (one sample of a batch), a unit direction ``v`` over the
sample's dimensions and a step ``eps``::

    kappa(x, v) = || f(x + eps v) - 2 f(x) + f(x - eps v) ||_P / eps**2

which tends to ``|| D^2 f(x)[v, v] ||_P`` as eps -> 0; it is 0 for an affine map and
``2 ||A v v||``-like for a quadratic. It is averaged over random unit directions and over the
inputs of the batch (the proxy of arXiv 2604.14702). ``P`` is the output metric: the identity
(isotropic) or a diagonal precision of condition number ``cond`` (anisotropic), trace-normalized
so both read on the same scale.

Why the eps sweep: small eps is swamped by roundoff (error ~ u ||f|| / eps**2), large eps by
the higher-order terms (~ eps**2). :func:`curvature_sweep` evaluates a log grid over
[1e-4, 1e-2] with the same directions at every eps and reports the plateau where kappa is
flat; values under the roundoff floor count as 0 (how an affine map reads 0, not 1e-8). The floor
uses a generous NOISE_FACTOR sized for float64; in float32 it hides most of the grid, so pass a
smaller ``noise_factor`` there. Everything is computed in float64 by default: an ``nn.Module``
is deep-copied, cast and put in eval mode (dropout would make finite differences meaningless);
the caller's module is left untouched. Results are plain floats, lists and dicts, ready for a logger.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from tsmix.errors import TsmixError

EPS_GRID: tuple[float, ...] = tuple(10.0 ** (-4 + 0.25 * i) for i in range(9))  # 1e-4 ... 1e-2
CONDS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0)  # condition numbers of the anisotropic metrics
MAX_BATCH = 4096  # samples per call of f: several directions share one batched forward
NOISE_FACTOR = 100.0  # roundoff floor = NOISE_FACTOR * unit roundoff * ||f|| / eps^2

Fn = Callable[[torch.Tensor], torch.Tensor]


def unit_directions(
    x: torch.Tensor, directions: int, seed: int = 0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Random directions (K, *x.shape), each of unit norm over one sample's dims (all but dim 0).

    Drawn on the CPU from ``seed`` (same directions on any device), then moved to ``x``'s device.
    """
    if directions < 1:
        raise TsmixError(f"curvature needs directions >= 1, got {directions}")
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn((directions, *x.shape), generator=gen, dtype=torch.float64)
    norms = v.flatten(2).norm(dim=-1)  # (K, B)
    v = v / norms.view(directions, x.shape[0], *([1] * (x.dim() - 1)))
    return v.to(device=x.device, dtype=dtype or x.dtype)


def anisotropic_precision(dim: int, cond: float, seed: int = 0) -> torch.Tensor:
    """Diagonal of a precision matrix (dim,), float64: log-spaced over [1, cond], mean 1.

    Its condition number is exactly ``cond``; the trace is normalized to ``dim`` so an isotropic
    error has the same expected size under it as under the identity. Which output coordinate
    gets which weight is a seeded permutation (no alignment with structured output dims).
    """
    if cond < 1:
        raise TsmixError(f"anisotropic precision needs cond >= 1, got {cond}")
    if dim == 1:
        return torch.ones(1, dtype=torch.float64)
    lam = torch.logspace(0.0, math.log10(cond), dim, dtype=torch.float64)
    lam = lam / lam.mean()
    perm = torch.randperm(dim, generator=torch.Generator().manual_seed(seed))
    return lam[perm]


def _prepare(f: nn.Module | Fn, dtype: torch.dtype) -> Fn:
    if isinstance(f, nn.Module):
        return copy.deepcopy(f).to(dtype).eval()
    return f


def _flat_out(f: Fn, x: torch.Tensor) -> torch.Tensor:  # (B, ...) -> (B, M)
    y = f(x)
    if not isinstance(y, torch.Tensor) or y.dim() == 0 or y.shape[0] != x.shape[0]:
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise TsmixError(
            f"curvature: f must return a tensor with the batch as dim 0 ({x.shape[0]}), got {shape}; "
            f"wrap f so it returns one (B, ...) tensor"
        )
    y = y.reshape(y.shape[0], -1)
    if not torch.isfinite(y).all():
        raise TsmixError("curvature: f returned non-finite values; check the inputs and the module")
    return y


def _metric_weights(m: int, conds: Sequence[float], seed: int, device) -> dict[str, torch.Tensor | None]:
    weights: dict[str, torch.Tensor | None] = {"iso": None}
    for c in conds:
        name = f"cond{c:g}"
        weights[name] = anisotropic_precision(m, c, seed).to(device)
    return weights


def _norm(d: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:  # (..., M) -> (...)
    if w is None:
        return d.norm(dim=-1)
    return (w.to(d.dtype) * d.square()).sum(-1).sqrt()


@torch.no_grad()
def _kappas(
    f: nn.Module | Fn, x: torch.Tensor, eps: Sequence[float], directions: int, conds: Sequence[float],
    seed: int, dtype: torch.dtype, max_batch: int = MAX_BATCH,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, float]]:
    """kappa and slope ||(f(x + eps v) - f(x - eps v)) / 2 eps|| per metric as (E, K, B) tensors, and
    the mean ||f(x)|| per metric (for the roundoff floor)."""
    fn = _prepare(f, dtype)
    x = x.detach().to(dtype)
    try:
        f0 = _flat_out(fn, x)  # (B, M)
    except RuntimeError as exc:
        raise TsmixError(
            f"curvature: f failed on a {dtype} input ({exc}); pass the nn.Module itself (it is copied and "
            f"cast) or dtype= the dtype f expects"
        ) from exc
    weights = _metric_weights(f0.shape[1], conds, seed, f0.device)
    scale = {name: _norm(f0, w).mean().item() for name, w in weights.items()}
    v = unit_directions(x, directions, seed, dtype)  # (K, B, ...)
    b = x.shape[0]
    out = {name: torch.empty(len(eps), directions, b, dtype=torch.float64) for name in weights}
    slope = {name: torch.empty_like(t) for name, t in out.items()}
    group = max(1, max_batch // (2 * b))  # directions evaluated in one call of f
    for i, e in enumerate(eps):
        for k0 in range(0, directions, group):
            vk = v[k0 : k0 + group]  # (G, B, ...)
            g = vk.shape[0]
            xs = torch.cat([(x + e * vk).flatten(0, 1), (x - e * vk).flatten(0, 1)])  # (2GB, ...)
            both = _flat_out(fn, xs).view(2, g, b, -1)  # (2, G, B, M)
            d2 = (both[0] - 2.0 * f0 + both[1]) / (e * e)  # (G, B, M)
            d1 = (both[0] - both[1]) / (2.0 * e)  # (G, B, M)
            for name, w in weights.items():
                out[name][i, k0 : k0 + g] = _norm(d2, w).cpu().double()
                slope[name][i, k0 : k0 + g] = _norm(d1, w).cpu().double()
    return out, slope, scale


def curvature(
    f: nn.Module | Fn, x: torch.Tensor, *, eps: float = 1e-3, directions: int = 16,
    cond: float | None = None, seed: int = 0, dtype: torch.dtype = torch.float64,
) -> float:
    """Mean kappa over the inputs ``x`` (B, ...) and ``directions`` random unit directions at one ``eps``.

    With the defaults (isotropic, eps = 1e-3) this is the paper's kappa exactly, no plateau search.

    ``cond`` None is the isotropic metric; a number uses :func:`anisotropic_precision`. ``f`` is
    any module or callable mapping a (B, ...) batch to a (B, ...) tensor, sample by sample.
    """
    conds = () if cond is None else (cond,)
    k, _, _ = _kappas(f, x, [eps], directions, conds, seed, dtype)
    name = "iso" if cond is None else f"cond{cond:g}"
    return k[name].mean().item()


def find_plateau(
    eps: Sequence[float], values: Sequence[float], floor: Sequence[float] | None = None,
    rtol: float = 0.05, min_points: int = 3,
) -> dict:
    """The longest run of consecutive eps where kappa is flat (max/min - 1 <= rtol).

    Values at or below ``floor`` (the roundoff level at that eps) are indistinguishable from 0 and
    count as exactly 0; a run may be all zeros (an affine map) or all nonzero, never mixed. Ties go
    to the flatter run. Returns kappa (the run's median), its eps range, points, spread and
    ``found`` (at least ``min_points`` points).
    """
    n = len(values)
    if n == 0 or len(eps) != n or (floor is not None and len(floor) != n):
        raise TsmixError("find_plateau needs eps, values (and floor) of the same nonzero length")
    vals = [0.0 if (floor is not None and v <= fl) else float(v) for v, fl in zip(values, floor or [0.0] * n)]
    best: tuple[int, float, int, int] | None = None  # (-length, spread, i, j)
    for i in range(n):
        for j in range(i, n):
            w = vals[i : j + 1]
            if all(v == 0.0 for v in w):
                spread = 0.0
            elif any(v <= 0.0 for v in w):
                break  # mixing zero and nonzero: no longer window from i can be flat either
            else:
                spread = max(w) / min(w) - 1.0
                if spread > rtol:
                    break  # spread only grows as the window extends
            cand = (-(j - i + 1), spread, i, j)
            if best is None or cand < best:
                best = cand
    _, spread, i, j = best
    window = sorted(vals[i : j + 1])
    mid = len(window) // 2
    median = window[mid] if len(window) % 2 else 0.5 * (window[mid - 1] + window[mid])
    return {
        "kappa": median,
        "eps_lo": float(eps[i]),
        "eps_hi": float(eps[j]),
        "points": j - i + 1,
        "spread": spread,
        "found": j - i + 1 >= min_points,
    }


def curvature_sweep(
    f: nn.Module | Fn, x: torch.Tensor, *, eps: Sequence[float] = EPS_GRID, directions: int = 16,
    conds: Sequence[float] = CONDS, seed: int = 0, dtype: torch.dtype = torch.float64,
    rtol: float = 0.05, noise_factor: float = NOISE_FACTOR,
) -> dict:
    """kappa over an eps grid (default 9 log-spaced points in [1e-4, 1e-2]) and its plateau per metric.

    The same directions are used at every eps (common random numbers: a smooth curve). Metrics:
    ``iso`` and ``cond<c>`` for each ``c`` in ``conds``. Returns a plain dict::

        {"eps": [...], "metrics": [...], "n_inputs": B, "n_directions": K, "dtype": "float64",
         "curves": {metric: [mean kappa per eps]}, "std": {metric: [...]},
         "slope": {metric: [mean first-difference norm per eps]},
         "floor": {metric: [roundoff floor per eps]},
         "plateau": {metric: find_plateau(...) + {"slope", "relative": kappa / slope}}}

    :func:`curvature_metrics` flattens it into floats for a logger.
    """
    eps = sorted(float(e) for e in eps)
    if not eps or eps[0] <= 0:
        raise TsmixError(f"curvature eps values must be positive, got {eps}")
    k, slope, scale = _kappas(f, x, eps, directions, conds, seed, dtype)
    unit = torch.finfo(dtype).eps
    report: dict = {
        "eps": eps, "metrics": list(k), "n_inputs": int(x.shape[0]), "n_directions": directions,
        "dtype": str(dtype).replace("torch.", ""), "curves": {}, "std": {}, "slope": {}, "floor": {},
        "plateau": {},
    }
    for name, kap in k.items():
        curve = kap.flatten(1).mean(1).tolist()  # (E,) mean over directions and inputs
        floor = [noise_factor * unit * scale[name] / (e * e) for e in eps]
        report["curves"][name] = curve
        report["std"][name] = kap.flatten(1).std(1, correction=0).tolist()
        report["floor"][name] = floor
        plateau = find_plateau(eps, curve, floor, rtol=rtol)
        # kappa / slope: invariant to rescaling f's output (a gate that halves Y halves kappa too)
        s = slope[name].flatten(1).mean(1)  # (E,)
        i, j = eps.index(plateau["eps_lo"]), eps.index(plateau["eps_hi"])
        plateau["slope"] = s[i : j + 1].median().item()
        plateau["relative"] = plateau["kappa"] / plateau["slope"] if plateau["slope"] > 0 else math.inf
        report["curves"][name] = curve
        report["slope"][name] = s.tolist()
        report["plateau"][name] = plateau
    return report


def curvature_metrics(report: dict, prefix: str = "kappa") -> dict[str, float]:
    """Flat ``{name: float}`` from a :func:`curvature_sweep` report: plateau kappa per metric, and the
    isotropic plateau's relative curvature (kappa / slope), eps range, point count and spread
    (for MLflow ``log_metrics`` or a CSV row)."""
    out = {f"{prefix}_{m}": float(report["plateau"][m]["kappa"]) for m in report["metrics"]}
    iso = report["plateau"]["iso"]
    out[f"{prefix}_iso_relative"] = float(iso["relative"])
    out[f"{prefix}_iso_eps_lo"] = iso["eps_lo"]
    out[f"{prefix}_iso_eps_hi"] = iso["eps_hi"]
    out[f"{prefix}_iso_plateau_points"] = float(iso["points"])
    out[f"{prefix}_iso_plateau_spread"] = float(iso["spread"])
    return out
