"""Search over packed binary codes: symmetric Hamming (popcount) and the asymmetric distances of Gordo et al. 2014.

Bit order of packed codes (used everywhere in :mod:`retrieval.codes.binary`): bit ``k`` of a code
(``h_k``, ``k = 0 .. nbits - 1``) is stored in byte ``k // 8`` at bit position ``k % 8`` counted from the
least significant bit, i.e. ``np.packbits(bits, axis=1, bitorder="little")``. When ``nbits`` is not a
multiple of 8 the unused high bits of the last byte are 0.

- :func:`hamming_topk` — symmetric Hamming distance with a compiled popcount (numba, LLVM ``ctpop``),
  k smallest per query by a counting selection (distances are small integers).
- :func:`byte_tables` — turns per-bit costs ``beta_k^0, beta_k^1`` (Gordo et al. 2014, eq. 24-25 for d_E, eq. 31-32
  ``gamma`` for d_LB) into one 256-entry table per byte, so that the asymmetric distance (eq. 26 / eq. 33) is
  the sum over bytes of a table look-up; the scan itself is the shared kernel
  :func:`retrieval.codes.scan.lut_scan_topk`, the same one PQ's ADC uses.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from retrieval.core.checks import check_array, check_scalar

BIT_ORDER = "little"


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """Pack a 0/1 matrix into bytes with the documented bit order (``np.packbits(bitorder="little")``).

    Parameters
    ----------
    bits : ndarray of shape (n, nbits), dtype bool or any integer (0/1)

    Returns
    -------
    codes : ndarray of shape (n, ceil(nbits / 8)), dtype uint8
    """
    bits = np.asarray(bits)
    if bits.ndim != 2:
        raise ValueError(f"bits must be a 2-d array of shape (n, nbits); got shape {bits.shape}.")
    return np.packbits(bits.astype(bool), axis=1, bitorder=BIT_ORDER)


def unpack_bits(codes: np.ndarray, nbits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`.

    Parameters
    ----------
    codes : ndarray of shape (n, nbytes), dtype uint8
    nbits : int

    Returns
    -------
    bits : ndarray of shape (n, nbits), dtype uint8 (0/1)
    """
    codes = np.asarray(codes, dtype=np.uint8)
    return np.unpackbits(codes, axis=1, count=nbits, bitorder=BIT_ORDER)


@intrinsic
def _popcount64(typingctx, x):
    """LLVM ``ctpop`` on a uint64 (compiles to the POPCNT instruction on x86-64)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [args[0].type])
        return builder.call(fn, args)

    return sig, codegen


@numba.njit(cache=True, nogil=True)
def _hamming_one(words, qw, k, hist, cand_i, cand_d, out_d, out_i):
    """One query: single pass with a shrinking threshold T (the k-th smallest distance seen so far).

    Distances are small integers, so ``hist[d]`` counts the kept candidates at distance ``d``; T decreases as
    soon as ``k`` candidates lie strictly below it. Candidates are kept in id order, so ties are broken by id.
    """
    n, nw = words.shape
    nbins = hist.shape[0]
    for b in range(nbins):
        hist[b] = 0
    kk = min(k, n)
    if kk == 0:
        return
    T = nbins - 1
    n_le = 0          # candidates with d <= T
    nc = 0
    cap = cand_i.shape[0]
    for i in range(n):
        acc = numba.uint64(0)
        for w in range(nw):
            acc += _popcount64(words[i, w] ^ qw[w])
        d = numba.int64(acc)
        if d < T or (d == T and n_le < kk):
            if nc == cap:
                # compact: drop candidates above T and ties at T beyond the (kk - below) earliest ones;
                # afterwards nc <= kk < cap
                below_t = n_le - hist[T]
                quota = kk - below_t
                kept = 0
                m = 0
                for j in range(nc):
                    dj = cand_d[j]
                    if dj < T or (dj == T and kept < quota):
                        if dj == T:
                            kept += 1
                        cand_i[m] = cand_i[j]
                        cand_d[m] = dj
                        m += 1
                hist[T] = kept
                n_le = below_t + kept
                nc = m
            cand_i[nc] = i
            cand_d[nc] = d
            nc += 1
            hist[d] += 1
            n_le += 1
            while T > 0 and n_le - hist[T] >= kk:
                n_le -= hist[T]
                hist[T] = 0
                T -= 1
    # counting sort of the kept candidates (d <= T), ties at T limited to what is needed
    below = n_le - hist[T]
    offs = np.zeros(T + 2, np.int64)
    for b in range(T):
        offs[b + 1] = offs[b] + hist[b]
    offs[T + 1] = offs[T] + (kk - below)
    pos = offs.copy()
    for j in range(nc):
        d = cand_d[j]
        if d < T or (d == T and pos[T] < offs[T + 1]):
            p = pos[d]
            out_d[p] = d
            out_i[p] = cand_i[j]
            pos[d] = p + 1


@numba.njit(cache=True, parallel=True)
def _hamming_batch(words, qwords, k, nbins, out_d, out_i, nthreads):
    nq = qwords.shape[0]
    chunk = (nq + nthreads - 1) // nthreads
    for t in numba.prange(nthreads):
        hist = np.zeros(nbins, np.int64)
        cap = max(8 * k, 65536)
        cand_i = np.empty(cap, np.int64)
        cand_d = np.empty(cap, np.int64)
        for q in range(t * chunk, min(nq, (t + 1) * chunk)):
            _hamming_one(words, qwords[q], k, hist, cand_i, cand_d, out_d[q], out_i[q])


def _as_words(codes: np.ndarray) -> np.ndarray:
    """View (n, nbytes) uint8 codes as (n, ceil(nbytes / 8)) uint64 words (zero-padded copy if needed)."""
    n, nbytes = codes.shape
    nw = (nbytes + 7) // 8
    if nbytes == nw * 8 and codes.flags.c_contiguous:
        return codes.view(np.uint64)
    padded = np.zeros((n, nw * 8), dtype=np.uint8)
    padded[:, :nbytes] = codes
    return padded.view(np.uint64)


def hamming_topk(query_codes: np.ndarray, codes: np.ndarray, k: int, *, threads: int = 1
                 ) -> tuple[np.ndarray, np.ndarray]:
    """k nearest database codes in Hamming distance (Gordo et al. 2014, symmetric baseline), compiled popcount.

    Parameters
    ----------
    query_codes : ndarray of shape (nq, nbytes), dtype uint8
    codes : ndarray of shape (n, nbytes), dtype uint8
    k : int
    threads : int
        Threads over queries.

    Returns
    -------
    distances : ndarray of shape (nq, k), dtype float32
        Hamming distances, ascending; ties broken by smaller id; padded with +inf.
    ids : ndarray of shape (nq, k), dtype int64
        Padded with -1.
    """
    query_codes = check_array(query_codes, "query_codes", dtype=np.uint8)
    codes = check_array(codes, "codes", dtype=np.uint8, n_features=query_codes.shape[1])
    check_scalar(k, "k", "hamming_topk", low=1)
    check_scalar(threads, "threads", "hamming_topk", low=1)
    nq = query_codes.shape[0]
    words = _as_words(np.ascontiguousarray(codes))
    qwords = _as_words(np.ascontiguousarray(query_codes))
    nbins = 64 * words.shape[1] + 1
    out_d = np.full((nq, k), -1, dtype=np.int32)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    if nq and codes.shape[0]:
        nthreads = max(1, min(threads, nq, numba.config.NUMBA_NUM_THREADS))
        _hamming_batch(words, qwords, k, nbins, out_d, out_i, nthreads)
    D = out_d.astype(np.float32)
    D[out_i < 0] = np.inf
    return D, out_i


def hamming_distances(query_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """All pairwise Hamming distances (NumPy; for small sets and tests).

    Parameters
    ----------
    query_codes : ndarray of shape (nq, nbytes), dtype uint8
    codes : ndarray of shape (n, nbytes), dtype uint8

    Returns
    -------
    ndarray of shape (nq, n), dtype int32
    """
    x = np.bitwise_xor(np.asarray(query_codes, np.uint8)[:, None, :], np.asarray(codes, np.uint8)[None, :, :])
    return np.bitwise_count(x).sum(axis=2, dtype=np.int32)


_BYTE_BITS = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.float32)  # (256, 8)
_BYTE_ZEROS = 1.0 - _BYTE_BITS                                                               # (256, 8)


def byte_tables(cost0: np.ndarray, cost1: np.ndarray) -> np.ndarray:
    """Per-bit costs -> one 256-entry look-up table per byte (Gordo et al. 2014, the block-of-8-bits remark after eq. 26).

    For byte ``b`` and byte value ``v``, ``table[b, v] = sum_{j<8} cost^{bit_j(v)}_{8b+j}`` with the
    little-endian bit order of :func:`pack_bits`. Padding bits (beyond ``nbits``) cost 0.

    Parameters
    ----------
    cost0, cost1 : ndarray of shape (nq, nbits), dtype float
        Cost of database bit ``k`` being 0 / 1 for each query (``beta_k^0, beta_k^1`` of eq. 24-25 or
        ``gamma_k^0, gamma_k^1`` of eq. 31-32).

    Returns
    -------
    tables : ndarray of shape (nq, ceil(nbits / 8), 256), dtype float32
    """
    cost0 = np.atleast_2d(np.asarray(cost0, dtype=np.float32))
    cost1 = np.atleast_2d(np.asarray(cost1, dtype=np.float32))
    if cost0.shape != cost1.shape:
        raise ValueError(f"cost0 and cost1 must have the same shape; got {cost0.shape} and {cost1.shape}.")
    nq, nbits = cost0.shape
    nbytes = (nbits + 7) // 8
    pad = nbytes * 8 - nbits
    c0 = np.pad(cost0, ((0, 0), (0, pad))).reshape(nq, nbytes, 8)
    c1 = np.pad(cost1, ((0, 0), (0, pad))).reshape(nq, nbytes, 8)
    # table[q, b, v] = sum_j [bit_j(v) = 1] c1[q,b,j] + [bit_j(v) = 0] c0[q,b,j]: a sum of the selected
    # costs only (no c0 + (c1 - c0) cancellation, so a zero d_LB stays exactly 0)
    tables = c1.reshape(-1, 8) @ _BYTE_BITS.T + c0.reshape(-1, 8) @ _BYTE_ZEROS.T      # (nq * nbytes, 256)
    return np.ascontiguousarray(tables.reshape(nq, nbytes, 256), dtype=np.float32)


def asymmetric_topk(cost0: np.ndarray, cost1: np.ndarray, codes: np.ndarray, k: int, *, threads: int = 1
                    ) -> tuple[np.ndarray, np.ndarray]:
    """k smallest asymmetric distances ``sum_k cost^{h_k(y)}_k`` (Gordo et al. 2014, eq. 26 / eq. 33).

    Builds the per-byte tables with :func:`byte_tables` and scans them with the shared kernel
    :func:`retrieval.codes.scan.lut_scan_topk`.

    Parameters
    ----------
    cost0, cost1 : ndarray of shape (nq, nbits), dtype float
    codes : ndarray of shape (n, ceil(nbits / 8)), dtype uint8
    k : int

    Returns
    -------
    distances : ndarray of shape (nq, k), dtype float32 (padded with +inf)
    ids : ndarray of shape (nq, k), dtype int64 (padded with -1)
    """
    from retrieval.codes import scan

    tables = byte_tables(cost0, cost1)
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    if codes.ndim != 2 or codes.shape[1] != tables.shape[1]:
        raise ValueError(f"codes must have shape (n, {tables.shape[1]}); got {codes.shape}.")
    return scan.lut_scan_topk(tables, codes, k, threads=threads)
