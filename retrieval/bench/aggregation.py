"""The measurements behind ``retrieval bench aggregate``: Fisher-vector encoding against VLFeat, GMM training.

Fisher vectors (Jegou et al. 2012, section III) of synthetic images drawn from a known diagonal GMM are
encoded by our :class:`~retrieval.aggregation.FisherVector` and by VLFeat's ``fisher`` (cyvlfeat) in the same
run, interleaved, best of ``repeats``; the relative difference of the two encodings checks that the same thing
is computed.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np

from retrieval.aggregation import FisherVector, GMMVocabulary


def synthetic_gmm_images(n_images: int, T: int, d: int, K: int, seed: int = 0):
    """A random diagonal GMM and ``n_images`` images of ``T`` descriptors drawn from it (variances x 2.25).

    Returns ``(weights (K,), means (K, d), variances (K, d), images)``, all float32; ``images`` is a list of
    ``n_images`` arrays of shape (T, d).
    """
    rng = np.random.default_rng(seed)
    w = rng.random(K) + 0.5
    w = (w / w.sum()).astype(np.float32)
    mu = rng.standard_normal((K, d)).astype(np.float32)
    var = (0.2 + rng.random((K, d))).astype(np.float32)
    comp = rng.choice(K, size=(n_images, T), p=w / w.sum())
    imgs = [(mu[c] + rng.standard_normal((T, d)) * np.sqrt(var[c]) * 1.5).astype(np.float32) for c in comp]
    return w, mu, var, imgs


def fisher_speed(n_images: int = 40, T: int = 3000, d: int = 64, K: int = 64, seed: int = 0,
                 repeats: int = 3) -> dict:
    """Seconds per image of VLFeat's improved Fisher vector and of ours (means only; means and variances).

    Returns a JSON-able dict: the parameters, ``seconds_per_image`` ({"vlfeat", "ours_means",
    "ours_means_variances"}), the two ratios to VLFeat and ``relative_difference_to_vlfeat`` (||ours -
    vlfeat|| / ||vlfeat|| over all images, means and variances). Needs cyvlfeat.
    """
    from cyvlfeat.fisher import fisher  # optional reference (the bench extra)

    w, mu, var, imgs = synthetic_gmm_images(n_images, T, d, K, seed)
    gmm = SimpleNamespace(weights_=w, means_=mu, covariances_=var)  # what FisherVector.from_gmm reads
    fv_means = FisherVector.from_gmm(gmm)
    fv_both = FisherVector.from_gmm(gmm, variances=True)
    best = {"vlfeat": np.inf, "ours_means": np.inf, "ours_means_variances": np.inf}
    for _ in range(repeats):  # interleaved, best of `repeats`
        t = time.perf_counter()
        ref = [fisher(x, mu, var, w, improved=True) for x in imgs]
        best["vlfeat"] = min(best["vlfeat"], time.perf_counter() - t)
        t = time.perf_counter()
        fv_means.transform(imgs)
        best["ours_means"] = min(best["ours_means"], time.perf_counter() - t)
        t = time.perf_counter()
        ours = fv_both.transform(imgs)
        best["ours_means_variances"] = min(best["ours_means_variances"], time.perf_counter() - t)
    ref = np.stack(ref)
    err = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    per = {k: v / n_images for k, v in best.items()}
    return {
        "K": K, "d": d, "descriptors_per_image": T, "n_images": n_images, "repeats": repeats,
        "seconds_per_image": {k: round(v, 6) for k, v in per.items()},
        "ratio_means_to_vlfeat": round(per["ours_means"] / per["vlfeat"], 3),
        "ratio_means_variances_to_vlfeat": round(per["ours_means_variances"] / per["vlfeat"], 3),
        "relative_difference_to_vlfeat": err,
        "note": "cyvlfeat fisher always computes means and variances (2Kd), improved = sqrt + L2",
    }


def gmm_speed(n: int = 1_000_000, d: int = 64, K: int = 256, seed: int = 0, max_iter: int = 100) -> dict:
    """Training time of a ``K``-component :class:`GMMVocabulary` on ``n`` clustered Gaussian vectors.

    Returns a JSON-able dict: the parameters, ``seconds``, ``n_iter``, ``converged``, ``mean_log_likelihood``
    and ``target_seconds`` (the time the configuration should stay under on two cores).
    """
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((4 * K, d)).astype(np.float32) * 1.5
    X = np.empty((n, d), np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        X[s:s + m] = C[rng.integers(0, len(C), m)] + rng.standard_normal((m, d)).astype(np.float32)
    t = time.perf_counter()
    g = GMMVocabulary(K, max_iter=max_iter, random_state=seed).fit(X)
    secs = time.perf_counter() - t
    return {"K": K, "d": d, "n_samples": n, "seconds": round(secs, 2), "n_iter": g.n_iter_,
            "converged": bool(g.converged_), "mean_log_likelihood": round(g.lower_bound_, 4),
            "target_seconds": 180}


def bench_aggregate(*, n_images: int = 40, T: int = 3000, d: int = 64, K: int = 64, repeats: int = 3,
                    gmm_samples: int = 1_000_000, gmm_components: int = 256, gmm_max_iter: int = 100,
                    seed: int = 0) -> dict:
    """``{"benchmark": "aggregate", "cpu_count", "fisher": fisher_speed(...), "gmm": gmm_speed(...)}``;
    ``"gmm"`` only when ``gmm_samples`` > 0."""
    result = {"benchmark": "aggregate", "cpu_count": os.cpu_count(),
              "fisher": fisher_speed(n_images, T, d, K, seed, repeats)}
    if gmm_samples:
        result["gmm"] = gmm_speed(gmm_samples, d, gmm_components, seed, gmm_max_iter)
    return result
