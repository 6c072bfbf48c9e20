"""``make setup`` (scripts/setup.sh) installs every compiler a test runs: a test that skips when a compiler is
missing (``shutil.which("g++")``) or runs one (``subprocess.run(["g++", ...])``) would otherwise skip on a machine
set up by the script itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"
COMPILERS = {"cc", "gcc", "g++", "c++", "clang", "clang++", "gfortran", "rustc", "cargo", "go", "javac", "nvcc"}


def compilers_the_tests_need() -> set[str]:
    """The compilers named by the tests: in ``shutil.which("X")`` or as the program of a ``subprocess`` call."""
    found = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text("utf-8")
        found |= set(re.findall(r"""shutil\.which\(\s*["']([^"']+)["']""", text))
        found |= set(re.findall(r"""subprocess\.(?:run|Popen|call|check_call|check_output)\(\s*\[\s*["']([^"']+)["']""",
                                text))
    return found & COMPILERS


def test_setup_checks_and_installs_every_compiler_a_test_needs():
    needed = compilers_the_tests_need()
    assert "g++" in needed   # the C++ cross-check of tests/evaluation/test_protocols.py
    script = SETUP.read_text("utf-8")
    for name in sorted(needed):
        line = re.search(rf"^command -v {re.escape(name)} >/dev/null 2>&1 \|\| need_apt\+=\(([^)]+)\)$", script, re.M)
        assert line, f"scripts/setup.sh does not install {name!r} when it is missing (a test needs it)"


@pytest.mark.skipif(not Path("/bin/bash").exists() or shutil.which("dpkg") is None,
                    reason="runs scripts/setup.sh's package check: needs /bin/bash and dpkg (Debian)")
def test_setup_asks_for_gpp_when_it_is_missing(tmp_path):
    """The script run where ``g++`` is not on PATH, as a user who cannot install packages (not root, no sudo): it
    stops before doing anything, printing the apt-get command it needs, which installs g++."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("dirname", "dpkg", "dpkg-query", "python3", "cc", "chromium", "chromium-browser", "google-chrome",
                 "chromedriver", "sha256sum", "cut", "cat"):
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")   # not root; and no sudo on this PATH
    (bin_dir / "id").chmod(0o755)
    proc = subprocess.run(["/bin/bash", str(SETUP)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": str(bin_dir), "VENV": str(tmp_path / "venv")})
    assert proc.returncode == 1, proc.stderr
    asked = re.search(r"sudo apt-get install -y (.+)$", proc.stderr, re.M)
    assert asked, proc.stderr
    assert "g++" in asked.group(1).split(), asked.group(1)
    assert not (tmp_path / "venv").exists()   # stopped before creating anything
