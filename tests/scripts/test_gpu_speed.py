"""The GPU check (`scripts/gpu_speed.py`) runs end to end on the CPU at tiny sizes, from another folder: every row of
its table is measured, and the table lands between the markers of the document it is given, nothing else of it
changed. What its arguments alone decide is refused before anything is measured."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import command_main, run_in_process
from lab.gpu_speed import MARKER

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_speed.py"


@pytest.mark.slow  # processes and compiled training: with RUN_SLOW=1 (CI)
def test_the_small_run_measures_every_row_and_fills_the_document(tmp_path):
    docs = tmp_path / "speed.md"
    docs.write_text(f"# Speed\n\nbefore\n\n{MARKER}\n(not run yet)\n{MARKER}\n\nafter\n", encoding="utf-8")
    done = subprocess.run(  # the child processes of the grid rows find `lab` without the tests' path
        [sys.executable, str(SCRIPT), "--device", "cpu", "--small", "--output-dir", "out", "--docs", "speed.md"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu-speed.json").read_text())
    measures = [row["measure"] for row in report["rows"]]
    assert measures[:2] == ["training, multi30k"] * 2  # eager, then compiled
    assert "generate(), bf16" in measures and any(measure.startswith("CTranslate2") for measure in measures)
    assert [m for m in measures if m.startswith("Table 3 grid")] == [
        "Table 3 grid's model, 1 process(es)",
        "Table 3 grid's model, 2 process(es)",
    ]
    training = report["rows"][0]
    assert training["ours"] > 0 and training["mfu"] > 0 and training["ours_over_marian"] > 0
    # one FLOP count for both models of identical dimensions. MFU is not bounded by 1 here: on a CPU without bf16
    # units (CI's, at times) the step's fp32 work outruns the bf16 matmul that is the peak on a GPU
    assert training["mfu"] / training["marian_mfu"] == pytest.approx(training["ours_over_marian"])
    assert all(row.get("ours", 1) > 0 for row in report["rows"])
    text = docs.read_text(encoding="utf-8")
    assert text.startswith("# Speed\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "(not run yet)" not in text
    assert (tmp_path / "out" / "gpu-speed.md").read_text() in text


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--docs", "notes.md"], "must hold two <!-- gpu-check --> lines"),
        (["--output-dir", "mine"], "did not create"),
        (["--sources", "missing.en"], "no file missing.en"),
        (["--device", "tpu"], "not a device of this machine"),
    ],
)
def test_what_the_arguments_decide_is_refused_in_one_line_before_measuring(tmp_path, argv, expected):
    (tmp_path / "notes.md").write_text("no markers\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gpu-speed.md").write_text("my own table\n")
    done = run_in_process(command_main("gpu_speed"), ["--device", "cpu", "--small", *argv], tmp_path)
    assert done.returncode == 2 and expected in done.stderr.splitlines()[-1], done.stderr
    assert (tmp_path / "mine" / "gpu-speed.md").read_text() == "my own table\n"
    assert not (tmp_path / "outputs").exists()  # the default output folder was never made
