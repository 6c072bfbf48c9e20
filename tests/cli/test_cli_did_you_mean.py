"""A mistyped command, option or preset gets one line (exit status 2, no usage block, no traceback) naming the bad
value and the closest valid ones; boxes are accepted with commas or spaces, and a bad one gets one line saying
what is expected (docs/cli.md, "Mistakes", "Boxes")."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from retrieval.cli.describe import PRESET_SUMMARIES
from retrieval.cli.main import main
from retrieval.cli.suggest import close_matches
from retrieval.features import parse_box


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_error_line(res) -> str:
    """The whole output of a usage error: exactly one line, starting with 'Error: '."""
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert "Traceback" not in res.output and "Usage:" not in res.output
    return lines[0]


@pytest.mark.parametrize("args, bad, suggested", [
    (["serach", "photo.jpg"], "'serach'", "'query' (for 'search')"),
    (["inde", "photos"], "'inde'", "'index'"),
    (["delet", "x.jpg"], "'delet'", "'remove' (for 'delete')"),
    (["eval", "runn"], "'runn'", "'run'"),
])
def test_mistyped_command(args, bad, suggested):
    line = one_error_line(run(args))
    assert f"no such command {bad}. Did you mean {suggested}?" in line


def test_a_command_near_nothing_lists_the_commands():
    line = one_error_line(run(["frobnicate"]))
    assert "no such command 'frobnicate'" in line and "Did you mean" not in line
    assert "index" in line and "query" in line and "duplicates" in line


def test_only_the_close_commands_are_suggested():
    # 'serach' is 0.83 from 'search' (-> query) and 0.62 from 'extract': only the first is named
    assert close_matches("serach", ["extract", "search", "serve"]) == ["search"]
    assert close_matches("--thresold", ["--threshold", "--help", "--top"]) == ["--threshold"]
    assert close_matches("zzz", ["index", "query"]) == []


@pytest.mark.parametrize("args, bad, where, suggested", [
    (["duplicates", "--thresold", "0.5"], "--thresold", "retrieval duplicates", "--threshold"),
    (["index", "photos", "--presset", "accurate"], "--presset", "retrieval index", "--preset"),
    (["--verbsoe", "info"], "--verbsoe", "retrieval", "--verbose"),
    (["eval", "run", "holidays", "--preset", "default", "--trian-root", "x"], "--trian-root", "retrieval eval run",
     "--train-root"),
])
def test_mistyped_option(args, bad, where, suggested):
    line = one_error_line(run(args))
    assert f"no such option '{bad}' for '{where}'. Did you mean '{suggested}'?" in line


def test_an_option_of_another_command_gets_no_wrong_suggestion():
    # index has no option near --thresold: click alone suggested '--help'
    line = one_error_line(run(["index", "photos", "--thresold", "3"]))
    assert "no such option '--thresold' for 'retrieval index'" in line
    assert "Did you mean" not in line and "'retrieval index --help' lists its options" in line


def test_mistyped_preset_names_the_user_presets_not_the_research_ones(tmp_path):
    # checked before the photo folder: the folder here does not even exist
    line = one_error_line(run(["index", tmp_path / "nope", "--index", tmp_path / "i", "--preset", "acurate"]))
    assert "--preset 'acurate': unknown preset. Did you mean 'accurate'?" in line
    assert f"Presets for photo folders: {', '.join(PRESET_SUMMARIES)}" in line
    assert "paper-" not in line
    assert not (tmp_path / "i").exists()   # nothing created


def test_mistyped_research_preset_gets_the_research_names(tmp_path):
    line = one_error_line(run(["index", tmp_path, "--index", tmp_path / "i", "--preset", "paper-002-vlad6"]))
    assert "Did you mean 'paper-002-vlad64' or 'paper-002-vlad16'?" in line or \
        "Did you mean 'paper-002-vlad16' or 'paper-002-vlad64'?" in line
    assert "Presets for photo folders: default" in line


def test_unknown_preset_far_from_every_name(tmp_path):
    line = one_error_line(run(["index", tmp_path, "--index", tmp_path / "i", "--preset", "zzzz"]))
    assert "--preset 'zzzz': unknown preset." in line and "Did you mean" not in line
    assert "default, accurate, object, compact" in line and "paper-" not in line


@pytest.mark.parametrize("args", [["presets", "--show", "objekt"], ["demo", "--preset", "objekt"],
                                  ["eval", "run", "holidays", "--preset", "objekt"]])
def test_every_command_taking_a_preset_name_suggests(args):
    assert "Did you mean 'object'?" in one_error_line(run(args))


def test_a_preset_file_is_not_taken_for_a_name(tmp_path):
    line = one_error_line(run(["index", tmp_path, "--index", tmp_path / "i", "--preset", tmp_path / "missing.json"]))
    assert f"--preset '{tmp_path / 'missing.json'}': no such preset file" in line and "unknown preset" not in line
    (tmp_path / "mine.json").write_text("{not json")
    res = run(["index", tmp_path, "--index", tmp_path / "i", "--preset", tmp_path / "mine.json"])
    assert "unknown preset" not in res.output and "Did you mean" not in res.output   # read by the library


# ---------------------------------------------------------------------------------------------- boxes
@pytest.mark.parametrize("text", ["90 160 285 300", "90,160,285,300", "90, 160, 285, 300", " 90 ,160 ,285, 300 "])
def test_box_with_commas_or_spaces(text):
    assert parse_box(text) == (90.0, 160.0, 285.0, 300.0)


@pytest.mark.parametrize("text", ["90 160 285", "90;160;285;300", "90,,160,285,300", "a b c d", "1 2 3 4 5",
                                  "nan 1 2 3"])
def test_bad_box_says_what_is_expected(text):
    with pytest.raises(ValueError, match=r"4 finite numbers x1,y1,x2,y2 .* separated by commas or spaces"):
        parse_box(text)


def test_query_box_forms_give_the_same_results(cli_world):
    q = cli_world["photos"] / cli_world["pool"][1].name
    outs = []
    for text in ["10 10 100 90", "10,10,100,90", "10, 10, 100, 90"]:
        res = run(["query", q, "--index", cli_world["index"], "--bbox", text, "--top", "3", "--json"])
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout))
    assert outs[0] == outs[1] == outs[2] and outs[0]


@pytest.mark.parametrize("cmd", ["query", "match"])
@pytest.mark.parametrize("text", ["10 10 100", "ten,10,100,90"])
def test_bad_box_is_one_line_naming_the_option(cli_world, cmd, text):
    q = cli_world["photos"] / cli_world["pool"][1].name
    args = [cmd, q, *([q] if cmd == "match" else []), "--index", cli_world["index"], "--bbox", text]
    res = run(args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert re.fullmatch(r"Error: --bbox: box must be 4 finite numbers x1,y1,x2,y2 .*separated by commas or spaces, "
                        r"e\.g\. '90,160,285,300' or '90 160 285 300'; got '.*'\.", lines[0]), lines[0]
