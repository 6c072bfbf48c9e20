"""Duplicates of an index (``retrieval duplicates``, ``--against``, ``retrieval query --exclude-duplicates``).

Public surface:

- :func:`find_duplicates`, :func:`find_against`, :func:`exclude_duplicates` (:mod:`.finder`): the pairs and
  groups of an index, of outside files against it, and a ranked list without the query's copies;
- :class:`DuplicatePair`, :func:`build_groups` (:mod:`.groups`): a verified pair and the groups with their keeper;
- :mod:`.actions`: the plan of a run carried out (move, link, trash) and undone.

Inside: :mod:`.codes` (one compact global code per photo, kept beside the index), :mod:`.candidates` (codes
compared all against all), :mod:`.pair_verifier` (the index's verifier on a candidate pair), :mod:`.same_photo`
(the same photograph or another shot of the scene), :mod:`.sides` (the verification sides kept for a run),
:mod:`.report_html` (the HTML report).
"""

from retrieval.app.duplicates.finder import (
    DEFAULT_CANDIDATES,
    DEFAULT_THRESHOLD,
    exclude_duplicates,
    find_against,
    find_duplicates,
    pixel_digest,
)
from retrieval.app.duplicates.groups import DuplicatePair, build_groups

__all__ = ["DEFAULT_CANDIDATES", "DEFAULT_THRESHOLD", "DuplicatePair", "build_groups", "exclude_duplicates",
           "find_against", "find_duplicates", "pixel_digest"]
