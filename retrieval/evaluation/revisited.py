"""Revisited Oxford / Paris (Radenovic et al., CVPR 2018) scoring with revisitop's ``compute_map`` semantics.

Ground truth: the official ``gnd_roxford5k.pkl`` / ``gnd_rparis6k.pkl`` (``imlist``, ``qimlist``,
``gnd[i] = {bbx, easy, hard, junk}`` as indices into ``imlist``), read with :class:`RestrictedUnpickler`, which
resolves no global except the numpy array reconstruction names (plain containers need none).

Ranks: an integer array of shape (n_ranked, n_queries) — column i lists database indices for query i, best
first, as revisitop's ``ranks`` (n_ranked = n_database normally; fewer rows = truncated lists).

Setups, as revisitop's ``example_evaluate``:

- easy:   positives = easy,        junk = junk + hard
- medium: positives = easy + hard, junk = junk
- hard:   positives = hard,        junk = junk + easy

Per query: positions of positives and junk in the column; each positive's position is decreased by the number of
junk images ranked before it; AP = trapezoidal AP (``compute_ap``); P@k with ``kq = min(max(pos), k)`` (1-based
positions). Queries without positives in a setup are skipped (NaN) and excluded from the mean. revisitop fails on a
query none of whose positives is in a truncated list; we give it AP 0 and P@k 0. Printed like revisitop:
``>> roxford5k: mAP E: 67.34, M: 50.12, H: 23.45`` (percent, ``np.around(x * 100, 2)``).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.evaluation.ap import ap_from_ranks

SETUPS = ("easy", "medium", "hard")
KAPPAS = (1, 5, 10)

_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that only builds plain containers and numpy arrays.

    ``find_class`` refuses every global except numpy's array reconstruction names (``_reconstruct``, ``ndarray``,
    ``dtype``) and ``set``/``frozenset``, so a crafted file cannot run code.
    """

    def find_class(self, module, name):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a ground-truth file "
                                     "(only plain containers and numpy arrays are allowed).")


@dataclass
class RevisitedGroundTruth:
    """``imlist`` (database names), ``qimlist`` (query names), ``gnd`` (list of dicts with int arrays
    ``easy``, ``hard``, ``junk`` and ``bbx`` (x1, y1, x2, y2))."""

    name: str
    imlist: list
    qimlist: list
    gnd: list


def load_revisited_gnd(path, name: str | None = None) -> RevisitedGroundTruth:
    """Read an official ``gnd_*.pkl`` safely (see :class:`RestrictedUnpickler`) and check its structure."""
    path = Path(path)
    try:
        raw = RestrictedUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, IndexError, TypeError) as exc:
        raise ValueError(f"{path}: not a revisitop ground-truth pickle ({exc}).") from None
    if not isinstance(raw, dict) or not {"gnd", "imlist", "qimlist"} <= set(raw):
        raise ValueError(f"{path}: expected a dict with keys 'gnd', 'imlist', 'qimlist'.")
    imlist, qimlist = [str(x) for x in raw["imlist"]], [str(x) for x in raw["qimlist"]]
    if len(raw["gnd"]) != len(qimlist):
        raise ValueError(f"{path}: {len(raw['gnd'])} gnd entries for {len(qimlist)} queries.")
    gnd = []
    n = len(imlist)
    for i, g in enumerate(raw["gnd"]):
        entry = {}
        for key in ("easy", "hard", "junk"):
            arr = np.asarray(g.get(key, []), dtype=np.int64).reshape(-1)
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                raise ValueError(f"{path}: gnd[{i}]['{key}'] has indices outside [0, {n}).")
            entry[key] = arr
        entry["bbx"] = tuple(float(v) for v in g.get("bbx", ())) if g.get("bbx") is not None else None
        gnd.append(entry)
    if name is None:
        name = path.stem[4:] if path.stem.startswith("gnd_") else path.stem
    return RevisitedGroundTruth(name=name, imlist=imlist, qimlist=qimlist, gnd=gnd)


def setup_ground_truth(gnd: list, setup: str) -> list:
    """``[{'ok': int array, 'junk': int array}]`` for setup ``easy`` / ``medium`` / ``hard`` (see module docstring)."""
    out = []
    for g in gnd:
        if setup == "easy":
            ok, junk = g["easy"], np.concatenate([g["junk"], g["hard"]])
        elif setup == "medium":
            ok, junk = np.concatenate([g["easy"], g["hard"]]), g["junk"]
        elif setup == "hard":
            ok, junk = g["hard"], np.concatenate([g["junk"], g["easy"]])
        else:
            raise ValueError(f"setup must be one of {SETUPS}; got {setup!r}.")
        out.append({"ok": np.asarray(ok, dtype=np.int64), "junk": np.asarray(junk, dtype=np.int64)})
    return out


def check_ranks(ranks, n_database: int, n_queries: int) -> np.ndarray:
    """Validate a ranks array (n_ranked, n_queries) of database indices: integers, in range, no repeat per column."""
    ranks = np.asarray(ranks)
    if ranks.ndim != 2 or ranks.shape[1] != n_queries:
        raise ValueError(f"ranks must have shape (n_database, n_queries) = (<= {n_database}, {n_queries}); "
                         f"got {ranks.shape}.")
    if ranks.dtype.kind not in "iu":
        raise ValueError(f"ranks must hold integer database indices; got dtype {ranks.dtype}.")
    if ranks.shape[0] > n_database:
        raise ValueError(f"ranks has {ranks.shape[0]} rows but the database holds {n_database} images.")
    if ranks.size:
        bad = (ranks < 0) | (ranks >= n_database)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"ranks[{r}, {c}] = {ranks[r, c]} is not a database index in [0, {n_database}).")
        s = np.sort(ranks, axis=0)
        dup = s[1:] == s[:-1]
        if dup.any():
            r, c = np.argwhere(dup)[0]
            raise ValueError(f"query {c}: database image {s[r, c]} is ranked twice; expected each image once.")
    return ranks.astype(np.int64, copy=False)


def compute_map(ranks: np.ndarray, gnd: list, kappas=KAPPAS):
    """revisitop ``compute_map``: mAP, per-query AP, mean P@k and per-query P@k.

    Parameters
    ----------
    ranks : ndarray of shape (n_ranked, n_queries), int
    gnd : list of dict with int arrays ``ok`` and ``junk``
    kappas : sequence of int

    Returns
    -------
    map : float (NaN when no query has positives)
    aps : ndarray of shape (n_queries,), float64, NaN for skipped queries
    pr : ndarray of shape (len(kappas),), float64
    prs : ndarray of shape (n_queries, len(kappas)), float64, NaN for skipped queries
    """
    nq = len(gnd)
    aps = np.zeros(nq)
    prs = np.zeros((nq, len(kappas)))
    nempty = 0
    positions = np.arange(ranks.shape[0])
    for i in range(nq):
        qgnd = np.asarray(gnd[i]["ok"])
        if qgnd.shape[0] == 0:
            aps[i] = np.nan
            prs[i, :] = np.nan
            nempty += 1
            continue
        qjunk = np.asarray(gnd[i].get("junk", np.empty(0, dtype=np.int64)))
        col = ranks[:, i]
        pos = positions[np.isin(col, qgnd)]
        junk = positions[np.isin(col, qjunk)]
        # decrease each positive's position by the number of junk images before it
        pos = pos - np.searchsorted(junk, pos, side="left")
        aps[i] = ap_from_ranks(pos.tolist(), int(qgnd.shape[0]))
        pos1 = pos + 1
        for j, k in enumerate(kappas):
            if pos1.size == 0:
                prs[i, j] = 0.0
                continue
            kq = min(int(pos1.max()), int(k))
            prs[i, j] = np.count_nonzero(pos1 <= kq) / kq
    if nq - nempty == 0:
        return float("nan"), aps, np.full(len(kappas), np.nan), prs
    return (float(np.nansum(aps) / (nq - nempty)), aps, np.nansum(prs, axis=0) / (nq - nempty), prs)


@dataclass
class RevisitedScore:
    """Per setup: ``mAP``, ``mP@k`` and per-query AP (NaN = skipped)."""

    dataset: str
    setups: dict  # setup -> {"mAP": float, "mP@1": .., "mP@5": .., "mP@10": .., "aps": ndarray, "prs": ndarray}
    queries: list
    kappas: tuple = KAPPAS

    def format(self) -> str:
        """revisitop's two lines (percent, 2 decimals)."""
        e, m, h = (self.setups[s] for s in SETUPS)

        def pct(x):
            return np.around(np.asarray(x) * 100, decimals=2)

        mp = [np.array([s[f"mP@{k}"] for k in self.kappas]) for s in (e, m, h)]
        return (f">> {self.dataset}: mAP E: {pct(e['mAP'])}, M: {pct(m['mAP'])}, H: {pct(h['mAP'])}\n"
                f">> {self.dataset}: mP@k{list(self.kappas)} E: {pct(mp[0])}, M: {pct(mp[1])}, H: {pct(mp[2])}")

    def to_json(self) -> dict:
        def num(x):
            return None if np.isnan(x) else float(x)

        out = {"protocol": self.dataset, "mAP": {s: num(self.setups[s]["mAP"]) for s in SETUPS}}
        for s in SETUPS:
            d = self.setups[s]
            out[s] = {"mAP": num(d["mAP"]), **{f"mP@{k}": num(d[f"mP@{k}"]) for k in self.kappas},
                      "per_query": {q: num(a) for q, a in zip(self.queries, d["aps"], strict=True)}}
        out["per_query"] = {q: {s: num(self.setups[s]["aps"][i]) for s in SETUPS} for i, q in enumerate(self.queries)}
        return out


def evaluate_revisited(ranks, gt: RevisitedGroundTruth, kappas=KAPPAS) -> RevisitedScore:
    """Score ``ranks`` (n_ranked, n_queries) in the three setups (see the module docstring)."""
    ranks = check_ranks(ranks, len(gt.imlist), len(gt.qimlist))
    setups = {}
    for s in SETUPS:
        m, aps, pr, prs = compute_map(ranks, setup_ground_truth(gt.gnd, s), kappas)
        setups[s] = {"mAP": m, **{f"mP@{k}": float(v) for k, v in zip(kappas, pr, strict=True)}, "aps": aps, "prs": prs}
    return RevisitedScore(dataset=gt.name, setups=setups, queries=list(gt.qimlist), kappas=tuple(kappas))
