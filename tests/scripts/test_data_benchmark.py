"""`benchmark-data` writes only into a work folder it made, and its report where it was told."""

import hashlib
import json
from pathlib import Path

import pytest
from conftest import command_main

benchmark_data = command_main("benchmark_data")


def hashes(folder: Path) -> dict[str, str]:
    files = (path for path in folder.rglob("*") if path.is_file())
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def test_a_workdir_of_someone_elses_or_a_file_is_refused_before_anything_is_written(tmp_path, capsys):
    workdir = tmp_path / "mine"
    workdir.mkdir()
    (workdir / "cold-100.log").write_text("my notes\n")  # a name an earlier version wrote over
    before = hashes(tmp_path)
    with pytest.raises(SystemExit) as exit:
        benchmark_data(["--pairs", "100", "--workdir", str(workdir)])
    assert exit.value.code == 2 and "--workdir" in capsys.readouterr().err
    assert hashes(tmp_path) == before
    (tmp_path / "a-file").write_text("x\n")
    with pytest.raises(SystemExit) as exit:
        benchmark_data(["--pairs", "100", "--workdir", str(tmp_path / "a-file")])
    assert exit.value.code == 2 and "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_the_report_goes_into_the_workdir_unless_given_and_a_second_call_reuses_the_folder(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmark-data.json").write_text("a report of mine\n")  # in the current folder, not --workdir
    workdir = tmp_path / "work"
    flags = ["--pairs", "300", "--workdir", str(workdir), "--preset", "demo", "--train-flags", "--threads 1"]
    benchmark_data([*flags])
    assert (tmp_path / "benchmark-data.json").read_text() == "a report of mine\n"
    report = json.loads((workdir / "benchmark-data.json").read_text())
    assert [result["pairs"] for result in report["results"]] == [300]
    assert report["results"][0]["cold"]["first_update_s"] > 0
    assert (workdir / "logs-300" / "cold.log").is_file()
    benchmark_data([*flags, "--output", str(tmp_path / "second.json")])  # the same folder again
    assert json.loads((tmp_path / "second.json").read_text())["results"][0]["pairs"] == 300
    capsys.readouterr()
