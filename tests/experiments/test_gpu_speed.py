"""The GPU check runs end to end on the CPU at tiny sizes: every row of its table is measured, and the table lands
between the markers of the document it is given, nothing else of it changed."""

import json

import pytest

from vanilla_transformer.experiments.gpu_speed import MARKER, main

# processes and compiled training: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow


def test_the_small_run_measures_every_row_and_fills_the_document(tmp_path, capsys):
    docs = tmp_path / "speed.md"
    docs.write_text(f"# Speed\n\nbefore\n\n{MARKER}\n(not run yet)\n{MARKER}\n\nafter\n", encoding="utf-8")
    main(["--device", "cpu", "--small", "--output-dir", str(tmp_path / "out"), "--docs", str(docs)])
    capsys.readouterr()
    report = json.loads((tmp_path / "out" / "gpu-speed.json").read_text())
    measures = [row["measure"] for row in report["rows"]]
    assert measures[:2] == ["training, multi30k"] * 2  # eager, then compiled
    assert "generate(), bf16" in measures and any(measure.startswith("CTranslate2") for measure in measures)
    assert [m for m in measures if m.startswith("Table 3 grid")] == [
        "Table 3 grid's model, 1 process(es)",
        "Table 3 grid's model, 2 process(es)",
    ]
    training = report["rows"][0]
    assert training["ours"] > 0 and 0 < training["mfu"] < 1 and training["ours_over_marian"] > 0
    assert all(row.get("ours", 1) > 0 for row in report["rows"])
    text = docs.read_text(encoding="utf-8")
    assert text.startswith("# Speed\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "(not run yet)" not in text
    assert (tmp_path / "out" / "gpu-speed.md").read_text() in text
    docs.write_text("no markers\n")
    with pytest.raises(ValueError, match="must hold two <!-- gpu-check --> lines"):
        main(["--device", "cpu", "--small", "--output-dir", str(tmp_path / "again"), "--docs", str(docs)])
