"""Why IVFADC recall differs from faiss on Gaussian data: compares the coarse quantisers of our IVFADC and faiss
IndexIVFPQ trained on the same 30,000 Gaussian vectors (d=128, nlist 256, nprobe 4, 50,000 base vectors, 3,000
queries): the fraction of queries whose exact nearest neighbour lies in one of the visited lists, the k-means MSE,
the spread of the list sizes, and the final recall@1/10/100.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/indexing_coarse_diag.py      # about 20 s of CPU
"""

import faiss
import numpy as np
from threadpoolctl import threadpool_limits

from retrieval.search import IVFADC


def main():
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    d, nlist, nprobe = 128, 256, 4
    xt = rng.standard_normal((30000, d), dtype=np.float32)
    xb = rng.standard_normal((50000, d), dtype=np.float32)
    xq = rng.standard_normal((3000, d), dtype=np.float32)
    gt = faiss.knn(xq, xb, 1)[1][:, 0]
    with threadpool_limits(1):
        ours = IVFADC(nlist, 16, 8, nprobe, random_state=0).fit(xt)
        ours.add(xb)
        ref = faiss.IndexIVFPQ(faiss.IndexFlatL2(d), d, nlist, 16, 8)
        ref.cp.niter = 25
        ref.pq.cp.niter = 25
        ref.train(xt)
        ref.add(xb)
        ref.nprobe = nprobe
        for name, C in (("ours", ours.centroids_), ("faiss", ref.quantizer.reconstruct_n(0, nlist))):
            lb = faiss.knn(xb, C, 1)[1][:, 0]
            lq = faiss.knn(xq, C, nprobe)[1]
            coarse = np.mean([lb[gt[i]] in lq[i] for i in range(len(xq))])
            mse = faiss.knn(xt, C, 1)[0][:, 0].mean()
            std = np.bincount(lb, minlength=nlist).std()
            print(f"{name:5s} coarse recall {coarse:.4f}  k-means MSE {mse:.3f}  list size s.d. {std:.1f}")
        Io = ours.search(xq, 100)[1]
        If = ref.search(xq, 100)[1]
        for r in (1, 10, 100):
            print(f"recall@{r}: ours {np.mean((Io[:, :r] == gt[:, None]).any(1)):.4f}"
                  f"  faiss {np.mean((If[:, :r] == gt[:, None]).any(1)):.4f}")


if __name__ == "__main__":
    main()
