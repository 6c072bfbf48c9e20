"""Application: ``retrieval demo`` (what ``make demo`` runs) end to end. Slow: run with --runslow.

The demo folder holds scikit-image's real photos plus generated views of six of them; the image query is a crop
of ``coffee`` and must find the original and its other views first; the box query (on ``chelsea``) must find the
chelsea views; both galleries are written.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    res = subprocess.run([sys.executable, "-m", "retrieval.cli", "-q", "demo", "--out", str(tmp_path / "demo"),
                          "--quiet"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    image_part, box_part = out.split("Box query:")
    ranked = [ln.split()[-1] for ln in image_part.splitlines() if re.match(r"^\s+\d+\s", ln)]
    assert len(ranked) == 8
    assert sum("coffee" in p for p in ranked[:6]) == 6  # the crop itself, the original and its 4 other views
    boxed = [ln.split()[-1] for ln in box_part.splitlines() if re.match(r"^\s+\d+\s", ln)]
    assert sum("chelsea" in p for p in boxed[:6]) == 6
    for name in ("query-image.html", "query-box.html"):
        text = (tmp_path / "demo" / name).read_text()
        assert text.count('<figure class="result">') + text.count('<figure class="result verified">') == 8
