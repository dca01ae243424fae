"""`vanilla-transformer ablate`: the paper's Table 3 grid scaled to a preset, grids from files, a tiny grid trained
end to end by the real command (killed and resumed), and the table, CSV and plot it writes."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_model

from vanilla_transformer.experiments.ablation import (
    AblationRow,
    GridSettings,
    check_grid,
    check_output_folder,
    dev_perplexity,
    load_grid,
    run_grid,
    table3_grid,
)
from vanilla_transformer.training.presets import get_training_preset

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow


def changes(rows: list[AblationRow]) -> dict[str, dict]:
    return {row.name: dict(row.changes) for row in rows}


def test_the_built_in_grid_is_the_papers_table_3_on_the_base_model():
    rows = table3_grid(get_training_preset("paper-base"), seeds=3)
    check_grid(get_training_preset("paper-base"), rows)  # every row's model builds
    grid = changes(rows)
    assert [row.seed for row in rows if row.group == "base"] == [0, 1, 2] and grid["base"] == {}
    assert [grid[f"A h={r}"]["encoder_attention_heads"] for r in ("1", "1/2", "2", "4")] == [1, 4, 16, 32]
    assert [grid[f"B d_k={r}"] for r in ("1/4", "1/2")] == [{"qk_head_dim": 16}, {"qk_head_dim": 32}]
    assert [grid[f"C N={r}"]["decoder_layers"] for r in ("1/3", "2/3", "4/3")] == [2, 4, 8]
    assert (grid["C d_model=1/2"], grid["C d_model=2"]) == ({"d_model": 256}, {"d_model": 1024})
    assert (grid["C d_ff=1/2"]["encoder_ffn_dim"], grid["C d_ff=2"]["decoder_ffn_dim"]) == (1024, 4096)
    assert (grid["D P_drop=0"], grid["D P_drop+0.1"]) == ({"dropout": 0.0}, {"dropout": 0.2})
    assert (grid["D ε_ls=0"], grid["D ε_ls=0.2"]) == ({"label_smoothing": 0.0}, {"label_smoothing": 0.2})
    assert grid["E learned positions"] == {"position_encoding": "learned"} and grid["pre-LN"] == {
        "normalize_before": True
    }


def test_the_built_in_grid_scales_to_the_multi30k_model():
    preset = get_training_preset("multi30k")  # d_model 128, 4 heads (d_k 32), 4+4 layers, d_ff 256, dropout 0.3
    grid = changes(table3_grid(preset))
    check_grid(preset, table3_grid(preset))
    assert [grid[f"A h={r}"]["decoder_attention_heads"] for r in ("1", "1/2", "2", "4")] == [1, 2, 8, 16]
    assert [grid[f"B d_k={r}"]["qk_head_dim"] for r in ("1/4", "1/2")] == [8, 16]
    assert [grid[f"C N={r}"]["encoder_layers"] for r in ("1/3", "2/3", "4/3")] == [1, 3, 5]
    assert grid["C d_model=1/2"] == {"d_model": 64} and grid["D P_drop+0.1"] == {"dropout": 0.4}


def test_grid_files_and_their_mistakes(tmp_path):
    preset = get_training_preset("demo")
    path = tmp_path / "grid.json"
    path.write_text(
        json.dumps([{"name": "h=1", "changes": {"encoder_attention_heads": 1, "decoder_attention_heads": 1}}])
    )
    rows = load_grid(path)
    assert [row.name for row in rows] == ["base", "h=1"]  # the base row comes first
    check_grid(preset, rows)
    path.write_text(json.dumps([{"name": "x", "changes": {"heads": 2}}]))
    with pytest.raises(ValueError, match=r"row 'x' changes \['heads'\], which are neither fields"):
        check_grid(preset, load_grid(path))
    path.write_text(json.dumps([{"name": "x", "changes": {"dropout": 0}}, {"name": "x", "changes": {"dropout": 0}}]))
    with pytest.raises(ValueError, match=r"names rows \['x'\] more than once"):
        check_grid(preset, load_grid(path))
    path.write_text(json.dumps([{"name": "x", "changes": {"encoder_attention_heads": 3}}]))
    with pytest.raises(Exception, match="not divisible by encoder_attention_heads=3"):
        check_grid(preset, load_grid(path))
    path.write_text("{'name': 'x'}")
    with pytest.raises(ValueError, match="is not JSON"):
        load_grid(path)


def test_a_grid_row_with_a_misspelt_key_or_no_changes_is_refused_by_the_command(tmp_path, capsys):
    from vanilla_transformer.cli.main import main

    path = tmp_path / "grid.json"
    cases = [
        ([{"name": "h=1", "chagnes": {"encoder_attention_heads": 1}}], "row 1 ('h=1'): unknown key(s) ['chagnes']"),
        ([{"name": "h=1"}], "row 1 ('h=1'): no changes: it would train the base model"),
        ([{"name": "h=1", "changes": [["dropout", 0]]}], "row 1 ('h=1'): 'changes' must be an object"),
        ([{"name": "base"}, {"name": "s", "seed": "1", "changes": {"dropout": 0}}], "row 2 ('s'): 'seed' must be"),
    ]
    for grid, expected in cases:
        path.write_text(json.dumps(grid))
        with pytest.raises(SystemExit) as exited:
            main(["ablate", "--preset", "demo", "--grid", str(path), "--output-dir", str(tmp_path / "grid")])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert exited.value.code == 2 and expected in error, error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.json"]


def test_a_grid_folder_refuses_other_settings_and_strangers_folders(tmp_path):
    preset, settings = get_training_preset("demo"), GridSettings()
    check_output_folder(tmp_path / "grid", preset, settings)
    check_output_folder(tmp_path / "grid", preset, GridSettings(threads=4))  # threads change no result
    with pytest.raises(ValueError, match=r"other settings \(preset.max_steps differ\)"):
        check_output_folder(tmp_path / "grid", get_training_preset("demo", max_steps=10), settings)
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "chapter1.tex").write_text("months of work\n")
    with pytest.raises(ValueError, match="not empty and holds no grid of ours"):
        check_output_folder(tmp_path / "thesis", preset, settings)
    assert [p.name for p in (tmp_path / "thesis").iterdir()] == ["chapter1.tex"]


def test_dev_perplexity_is_the_exponent_of_the_unsmoothed_cross_entropy_per_target_token(builtin_tokenizer):
    model = tiny_model(vocab_size=len(builtin_tokenizer))
    sources, targets = ["A dog runs.", "The two big women see a small horse."], ["Ein Hund läuft.", "Die Frauen."]
    nll, tokens = 0.0, 0
    for source, target in zip(sources, targets, strict=True):  # one at a time: no padding anywhere
        labels = builtin_tokenizer(text_target=target, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            loss = model(**builtin_tokenizer(source, return_tensors="pt"), labels=labels).loss
        nll, tokens = nll + loss.item() * labels.numel(), tokens + labels.numel()
    assert dev_perplexity(model, builtin_tokenizer, sources, targets) == pytest.approx(math.exp(nll / tokens), rel=1e-5)


def test_the_command_trains_a_tiny_grid_resumes_it_after_a_kill_and_writes_the_table(tmp_path):
    (tmp_path / "grid.json").write_text(json.dumps([{"name": "d_k=8", "changes": {"qk_head_dim": 8}}]))
    argv = [sys.executable, "-m", "vanilla_transformer", "ablate", "--preset", "demo", "--grid", "grid.json",
            "--max-steps", "20", "--save-steps", "10", "--eval-steps", "20", "--warmup-steps", "10",
            "--eval-samples", "8", "--threads", "1", "--output-dir", "grid"]  # fmt: skip
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    rows = tmp_path / "grid" / "rows"
    with open(tmp_path / "kill.log", "w") as log:
        first = subprocess.Popen(argv, cwd=tmp_path, env=environment, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not (rows / "d_k=8" / "checkpoint-10").is_dir() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL, (tmp_path / "kill.log").read_text()[-3000:]
    base_record = (rows / "base" / "row.json").stat().st_mtime_ns
    assert not (rows / "d_k=8" / "row.json").exists() and not (tmp_path / "grid" / "table3.md").exists()

    done = subprocess.run(argv, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (rows / "base" / "row.json").stat().st_mtime_ns == base_record  # a finished row is not trained again
    assert "resuming from grid/rows/d_k=8/checkpoint-10" in done.stdout
    assert done.stdout.count("resuming from") == 1  # base: done, so neither trained nor resumed
    record = json.loads((rows / "d_k=8" / "row.json").read_text())
    assert record["changes"] == "qk_head_dim=8" and record["train_steps"] == 20
    assert record["parameters"] < json.loads((rows / "base" / "row.json").read_text())["parameters"]
    learned_once = (tmp_path / "grid" / "tokenizer" / "tokenizer.json").read_text()  # every row reads the grid's
    assert all((rows / row / "tokenizer" / "tokenizer.json").read_text() == learned_once for row in ("base", "d_k=8"))
    table = (tmp_path / "grid" / "table3.md").read_text().splitlines()
    assert table[0].startswith("| row | changes | parameters (M) | train steps | dev PPL | dev BLEU | test BLEU")
    assert [line.split(" | ")[0] for line in table[2:]] == ["| base", "| d_k=8"]
    with open(tmp_path / "grid" / "table3.csv") as handle:
        assert [row["row"] for row in csv.DictReader(handle)] == ["base", "d_k=8"]
    assert (tmp_path / "grid" / "table3.png").read_bytes().startswith(b"\x89PNG")
    assert Path(tmp_path / "grid" / "ablation.json").is_file()


def test_jobs_train_the_rows_at_once_in_processes_of_their_own_with_one_tokenizer(tmp_path):
    preset = get_training_preset("demo", max_steps=2, save_steps=2, eval_steps=2, warmup_steps=1, average_last=1)
    rows = [AblationRow("base", "base"), AblationRow("pre-LN", "LN", (("normalize_before", True),))]
    records = run_grid(preset, rows, tmp_path, GridSettings(eval_samples=4, threads=1), jobs=2, log=lambda _: None)
    assert [record["changes"] for record in records] == ["(the preset's model)", "normalize_before=True"]
    assert all(record["train_steps"] == 2 and record["dev_bleu"] >= 0 for record in records)
    learned_once = (tmp_path / "tokenizer" / "tokenizer.json").read_text()
    for row in rows:
        assert (tmp_path / "rows" / row.folder_name / "tokenizer" / "tokenizer.json").read_text() == learned_once
    assert (tmp_path / "table3.md").read_text().count("\n") == 4  # header, rule, two rows
