"""Evaluation protocols with the official tools' exact semantics.

One module per protocol: :mod:`.holidays` (``holidays_map.py``), :mod:`.oxford` (``compute_ap.cpp``),
:mod:`.revisited` (revisitop ``compute_map``), :mod:`.ukb` (4 x recall@4), :mod:`.recall` (recall@R),
:mod:`.copydays` (mAP per transformation family) and :mod:`.groups` (minibench-format photo groups).
The shared trapezoidal AP is in :mod:`.ap`.
"""

from retrieval.evaluation.ap import ap_from_ranks, average_precision, check_ranked_list, precision_at_k
from retrieval.evaluation.groups import GroupsBenchmark, GroupsScore, load_groups_spec, score_groups

__all__ = [
    "average_precision",
    "ap_from_ranks",
    "precision_at_k",
    "check_ranked_list",
    "GroupsBenchmark",
    "GroupsScore",
    "load_groups_spec",
    "score_groups",
]
