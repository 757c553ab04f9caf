"""The --shares file: good files load, bad ones are refused with their line."""

from __future__ import annotations

import pytest

from scheduler.sim.cli import main
from scheduler.sim.shares import SharesError, load_shares

SMALL = ["--policy", "fifo", "--workload", "synthetic", "--jobs", "40", "--cluster", "2x4", "--no-progress"]


def write(tmp_path, text: str) -> str:
    path = tmp_path / "shares.csv"
    path.write_text(text)
    return str(path)


def test_a_good_file(tmp_path):
    assert load_shares(write(tmp_path, "tenant,share\nt0,2\n\nt1, 0.5\n")) == {"t0": 2.0, "t1": 0.5}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", 1, "empty file"),
        ("team,weight\nt0,1\n", 1, "header must be tenant,share"),
        ("tenant,share\n", 2, "no tenant rows"),
        ("tenant,share\nt0,1\nt1,abc\n", 3, "column 'share': bad number"),
        ("tenant,share\nt0,1\nt1,0\n", 3, "must be a finite number > 0"),
        ("tenant,share\nt0,-2\n", 2, "must be a finite number > 0"),
        ("tenant,share\nt0,inf\n", 2, "must be a finite number > 0"),
        ("tenant,share\nt0,1\nt0,2\n", 3, "duplicate tenant 't0'"),
        ("tenant,share\nt0,1,7\n", 2, "expected 2 columns"),
    ],
)
def test_a_bad_file_names_its_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(SharesError) as e:
        load_shares(path)
    assert str(e.value).startswith(f"{path}:{line}: ")
    assert words in str(e.value)


def test_the_cli_refuses_a_bad_file_with_status_2_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, "tenant,share\nt0,1\nt1,-1\n")
    out = tmp_path / "out.json"
    assert main([*SMALL, "--shares", path, "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:3: column 'share'" in err[0]
    assert not out.exists()


def test_the_cli_refuses_a_missing_file_and_bad_options(tmp_path, capsys):
    assert main([*SMALL, "--shares", str(tmp_path / "nope.csv")]) == 2
    assert "cannot open" in capsys.readouterr().err
    assert main([*SMALL, "--half-life", "60"]) == 2
    assert "--half-life applies only with" in capsys.readouterr().err
    assert main([*SMALL, "--fair-share", "--half-life", "0"]) == 2
    assert "--half-life must be" in capsys.readouterr().err
    for bad in ("t0", "t0:0.5", "t9:2", "t0:x"):
        assert main([*SMALL, "--flood", bad]) == 2, bad
        assert "flood" in capsys.readouterr().err
