"""`scripts/table3.py`: the paper's Table 3 grid scaled to a preset, grids from files, a tiny grid trained
end to end by the real command (killed and resumed), and the table, CSV and plot it writes; the converged table's
parts (issue 48): records kept in a folder that a later run trains nothing for, the paired bootstrap, the agreement
with the paper, seeds where they matter, the learning rate chosen once, and plateaus and divergence."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import command_main, tiny_model
from lab.ablation import (
    AblationRow,
    check_grid,
    load_grid,
    reseed_rows,
    run_grid,
    table3_grid,
    table_from_records,
    with_base_seeds,
)
from lab.grid_records import (
    GridSettings,
    RecordFolder,
    check_grid_folder,
    grid_settings,
    record_text,
)
from lab.report import (
    PAPER_ROWS,
    agreement,
    bleu_from_statistics,
    choose_lr_factor,
    curve_status,
    paired_bootstrap,
    table_rows,
)
from lab.row_scores import bleu_statistics, dev_perplexity, tokenized_references

from vanilla_transformer.training.presets import get_training_preset

TABLE3 = str(Path(__file__).resolve().parents[2] / "scripts" / "table3.py")

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
    main = command_main("table3")

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
            main(["--preset", "demo", "--grid", str(path), "--output-dir", str(tmp_path / "grid")])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert exited.value.code == 2 and expected in error, error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.json"]


def test_a_grid_folder_refuses_other_settings_and_strangers_folders(tmp_path):
    preset, settings = get_training_preset("demo"), GridSettings()
    check_grid_folder(tmp_path / "grid", preset, settings)
    check_grid_folder(tmp_path / "grid", preset, GridSettings(threads=4))  # threads change no result
    with pytest.raises(ValueError, match=r"other settings \(preset.max_steps differ\)"):
        check_grid_folder(tmp_path / "grid", get_training_preset("demo", max_steps=10), settings)
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "chapter1.tex").write_text("months of work\n")
    with pytest.raises(ValueError, match="not empty and holds no grid of ours"):
        check_grid_folder(tmp_path / "thesis", preset, settings)
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
    argv = [sys.executable, TABLE3, "--preset", "demo", "--grid", "grid.json",
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


# ---- the converged table (issue 48) ----


def builtin_references(count: int = 200) -> list[str]:
    from vanilla_transformer.data.corpora import load_builtin, sides

    return sides(load_builtin("test"), "en", "de")[1][:count]


def total(statistics: list[list[int]]) -> list[int]:
    """Sentence statistics summed over the sentences."""
    return [sum(column) for column in zip(*statistics, strict=True)]


def drop_words(sentences: list[str], every: int, keep: float) -> list[str]:
    """Every `every`-th sentence cut to its first `keep` share of words: a system that much worse than the reference."""
    return [
        " ".join(s.split()[: max(1, int(len(s.split()) * keep))]) if number % every == 0 else s
        for number, s in enumerate(sentences)
    ]


def test_bleu_statistics_summed_give_sacrebleus_corpus_bleu_of_any_subset():
    from vanilla_transformer.inference.scoring import score_translations

    references = builtin_references()
    hypotheses = drop_words(references, every=2, keep=0.6)
    statistics = bleu_statistics(hypotheses, references)
    assert len(statistics) == len(references) and all(len(sentence) == 10 for sentence in statistics)
    full = score_translations(hypotheses, references)["bleu"]["score"]
    assert 20 < full < 100 and bleu_from_statistics(total(statistics)) == pytest.approx(full, abs=1e-9)
    subset = score_translations(hypotheses[50:90], references[50:90])["bleu"]["score"]
    assert bleu_from_statistics(total(statistics[50:90])) == pytest.approx(subset, abs=1e-9)


def test_the_table_from_records_seeds_deltas_paper_columns_big_row_and_curves(tmp_path):
    references = builtin_references()
    records = [
        fake_record("base", "base", hypotheses=drop_words(references, 3, 0.7), test_tokenized_bleu=50.0),
        fake_record("base seed 1", "base", seed=1, hypotheses=drop_words(references, 4, 0.7), test_tokenized_bleu=52.0),
        fake_record("C N=1/3", "C", (("encoder_layers", 1),), hypotheses=drop_words(references, 1, 0.5)),
        fake_record("C N=1/3 seed 1", "C", (("encoder_layers", 1),), 1, hypotheses=drop_words(references, 1, 0.6)),
        fake_record("D P_drop=0", "D", (("dropout", 0.0),), dev_curve=curve(10, 25, 3, 1), dev_bleu=0.8),
        fake_record("pre-LN", "LN", (("normalize_before", True),), dev_curve=curve(5, 10, 15, 21)),
    ]
    lines = {line["row"]: line for line in table_rows(records)}
    assert list(lines) == ["base", "C N=1/3", "D P_drop=0", "pre-LN", "big (paper)"]  # seeds on one line each
    base, shallow = lines["base"], lines["C N=1/3"]
    assert base["seeds"] == 2 and " ± " in base["test BLEU"] and base["test BLEU (tok.)"] == "51.0 ± 1.4"
    assert base["Δ test BLEU, seed 0 [95% CI]"] == "" and base["paper Δ BLEU"] == ""
    delta = paired_bootstrap(records[0]["test_bleu_statistics"], records[2]["test_bleu_statistics"])  # seed 0's
    assert (
        shallow["Δ test BLEU, seed 0 [95% CI]"] == f"{delta['delta']:+.1f} [{delta['low']:+.1f}, {delta['high']:+.1f}]"
    )
    assert delta["high"] < 0 and shallow["paper Δ BLEU"] == "-2.1" and shallow["agrees with paper"] == "agree"
    assert shallow["test BLEU (tok.)"] == "—"  # no tokenized references for this corpus
    assert lines["D P_drop=0"]["curve"] == "diverged: dev BLEU fell from 25.0 to 1.0"
    assert lines["pre-LN"]["curve"].startswith("not at plateau") and lines["pre-LN"]["paper Δ BLEU"] == ""
    assert (
        lines["big (paper)"]["paper BLEU"] == PAPER_ROWS["big"][1] == 26.4
        and lines["big (paper)"]["paper Δ BLEU"] == "+0.6"
    )

    # kept in a records folder, the table renders from it alone, in the grid's order
    preset, settings = get_training_preset("demo", max_steps=100), GridSettings(test_split="test2016")
    kept = RecordFolder(tmp_path / "records", grid_settings(preset, settings))
    for record in reversed(records):
        kept.keep(record)
    kept.note(rows=[record["row"]["name"] for record in records])
    paths = table_from_records(tmp_path / "records", tmp_path / "table")
    table = paths["md"].read_text().splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == [
        "| base",
        "| C N=1/3",
        "| D P_drop=0",
        "| pre-LN",
        "| big (paper)",
    ]
    assert "| -2.1 | agree | plateau" in table[3] and "| 2 |" in table[3]
    with open(paths["csv"]) as handle:
        assert [row["agrees with paper"] for row in csv.DictReader(handle)][:2] == ["", "agree"]
    assert paths["curves"].name == "table3_curves.png" and paths["curves"].read_bytes().startswith(b"\x89PNG")
    assert json.loads((tmp_path / "records" / "rows" / "C_N=1_3_seed_1.json").read_text()) == records[3]  # whole


def test_a_records_folder_refuses_other_settings_changed_rows_other_learning_rates_and_strangers(tmp_path):
    preset, settings = get_training_preset("demo"), GridSettings()
    kept = RecordFolder(tmp_path / "records", grid_settings(preset, settings))
    RecordFolder(tmp_path / "records", grid_settings(preset, replace(settings, threads=2)))  # threads change nothing
    with pytest.raises(ValueError, match=r"other settings \(preset.dropout, settings.test_split differ\)"):
        RecordFolder(
            tmp_path / "records", grid_settings(replace(preset, dropout=0.3), replace(settings, test_split="x"))
        )
    with pytest.raises(ValueError, match=r"settings.lr_factors differ"):
        RecordFolder(tmp_path / "records", grid_settings(preset, replace(settings, lr_factors=(1.0, 2.0))))
    kept.keep(fake_record("h=1", "A", (("encoder_attention_heads", 1),)))
    assert kept.get(AblationRow("h=1", "A", (("encoder_attention_heads", 1),)), 0.5)["row"]["name"] == "h=1"
    assert kept.get(AblationRow("h=2", "A", (("encoder_attention_heads", 2),)), 0.5) is None
    with pytest.raises(ValueError, match="the grid's row of that name is"):
        kept.get(AblationRow("h=1", "A", (("encoder_attention_heads", 2),)), 0.5)
    with pytest.raises(ValueError, match="was trained at lr_factor 0.5, but this grid trains 'h=1' at 1.0"):
        kept.get(AblationRow("h=1", "A", (("encoder_attention_heads", 1),)), 1.0)
    kept.note_lr_choice({"factors": [0.5, 1.0], "chosen": 0.5})
    with pytest.raises(ValueError, match="the lr_factor 0.5 chosen before, but the sweep now chooses 1.0"):
        kept.note_lr_choice({"factors": [0.5, 1.0], "chosen": 1.0})
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine\n")
    with pytest.raises(ValueError, match="not empty and holds no records of ours"):
        RecordFolder(tmp_path / "notes", grid_settings(preset, settings))
    with pytest.raises(ValueError, match="holds no grid's records"):
        table_from_records(tmp_path / "notes", tmp_path / "table")


def test_seeds_go_to_the_rows_close_to_the_base_and_the_learning_rate_is_chosen_on_dev():
    rows = [AblationRow("base", "base"), AblationRow("far", "A", (("dropout", 0.0),))]
    rows += [AblationRow("close", "B", (("dropout", 0.2),)), AblationRow("close on dev", "C", (("dropout", 0.3),))]
    rows = with_base_seeds(rows, 3)
    assert [(row.name, row.seed) for row in rows[:3]] == [("base", 0), ("base seed 1", 1), ("base seed 2", 2)]
    assert with_base_seeds(rows, 3) == rows  # seeds the grid has already are not added again
    scores = {"base": (20, 20), "base seed 1": (21, 21), "base seed 2": (22, 22), "far": (25, 25)}
    scores |= {"close": (19.5, 30), "close on dev": (10, 22.9)}  # (test, dev); the base's mean is 21
    records = {name: {"test_bleu": test, "dev_bleu": dev} for name, (test, dev) in scores.items()}
    second = reseed_rows(rows, records, 3)
    assert [(row.name, row.seed, row.changes) for row in second] == [
        ("close seed 1", 1, (("dropout", 0.2),)),
        ("close seed 2", 2, (("dropout", 0.2),)),
        ("close on dev seed 1", 1, (("dropout", 0.3),)),
        ("close on dev seed 2", 2, (("dropout", 0.3),)),
    ]
    assert reseed_rows(rows, records, 1) == []
    sweep = [
        {"lr_factor": 1.0, "dev_bleu": 20.0},
        {"lr_factor": 2.0, "dev_bleu": 24.0},
        {"lr_factor": 4.0, "dev_bleu": 24.0},
    ]
    assert choose_lr_factor(sweep) == 2.0  # the best on dev; the first of equals


def test_tokenized_references_come_from_a_multi30k_style_folder(tmp_path):
    for name in ("train", "validation", "test2016"):
        (tmp_path / f"{name}.en").write_text("A dog.\n")
        (tmp_path / f"{name}.de").write_text("Ein Hund.\n")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "test2016.lc.norm.tok.de").write_text("ein hund .\n")
    (tmp_path / "tok" / "validation.lc.norm.tok.de").write_text("ein hund !\n")
    assert tokenized_references(str(tmp_path), "test2016", "en", "de") == ["ein hund ."]
    assert tokenized_references(str(tmp_path), "valid", "en", "de") == ["ein hund !"]  # found as load_corpus finds it
    assert tokenized_references(str(tmp_path), "train", "en", "de") is None
    assert tokenized_references("builtin", "test", "en", "de") is None


def multi30k_style_corpus(folder: Path) -> Path:
    """The built-in corpus as a folder of Multi30k's layout, with the official-style tokenized references in tok/; its
    dev and test splits cut to 40 pairs, so that an evaluation during training takes little time."""
    from vanilla_transformer.data.corpora import load_builtin, sides
    from vanilla_transformer.inference.scoring import moses_tokenize

    folder.mkdir()
    (folder / "tok").mkdir()
    for split in ("train", "valid", "test"):
        sources, targets = sides(load_builtin(split), "en", "de")
        sources, targets = (sources, targets) if split == "train" else (sources[:40], targets[:40])
        (folder / f"{split}.en").write_text("\n".join(sources) + "\n")
        (folder / f"{split}.de").write_text("\n".join(targets) + "\n")
        if split != "train":
            (folder / "tok" / f"{split}.lc.norm.tok.de").write_text("\n".join(moses_tokenize(targets, "de")) + "\n")
    return folder


def test_the_command_keeps_records_that_a_later_run_trains_nothing_for_and_renders_the_table_from(
    tmp_path, monkeypatch, capsys
):
    """The learning rate chosen on the base row, seeds for the rows close to it, records with the test hypotheses,
    curves and tokenized BLEU kept in --records; a second run with a fresh --output-dir trains nothing and learns no
    tokenizer; --table-only renders the same table from the records alone."""
    corpus = multi30k_style_corpus(tmp_path / "corpus")
    (tmp_path / "grid.json").write_text(json.dumps([{"name": "d_k=8", "changes": {"qk_head_dim": 8}}]))
    argv = [sys.executable, TABLE3, "--preset", "demo", "--corpus", str(corpus),
            "--grid", "grid.json", "--max-steps", "20", "--save-steps", "10", "--eval-steps", "10",
            "--warmup-steps", "10", "--eval-samples", "8", "--threads", "1", "--seeds", "2",
            "--lr-factors", "0.5,1", "--records", "records"]  # fmt: skip
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    first = subprocess.run(
        argv + ["--output-dir", "first"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stderr[-3000:]
    kept = tmp_path / "records" / "rows"
    names = ["base", "base_lr_factor=0.5", "base_lr_factor=1", "base_seed_1", "d_k=8", "d_k=8_seed_1"]
    assert sorted(path.stem for path in kept.glob("*.json")) == names  # after 20 updates every row is near the base
    index = json.loads((tmp_path / "records" / "ablation.json").read_text())
    assert index["preset"]["lr_factor"] is None and index["settings"]["lr_factors"] == [0.5, 1.0]
    chosen = index["lr_sweep"]["chosen"]
    assert chosen in (0.5, 1.0) and index["rows"][:3] == ["base lr_factor=0.5", "base lr_factor=1", "base"]
    record = json.loads((kept / "d_k=8.json").read_text())
    assert record["lr_factor"] == chosen and len(record["test_hypotheses"]) == 8 == len(record["test_bleu_statistics"])
    assert [point["step"] for point in record["dev_curve"]] == [10, 20]  # what training logged, every 10 updates
    assert record["test_tokenized_bleu"] is not None and record["dev_tokenized_bleu"] is not None
    assert bleu_from_statistics(total(record["test_bleu_statistics"])) == pytest.approx(record["test_bleu"])
    base = json.loads((kept / "base.json").read_text())
    assert base["lr_sweep_row"] == f"base lr_factor={chosen:g}" and base["row"]["name"] == "base"
    assert not (tmp_path / "first" / "rows" / "base" / "checkpoint-20").exists()  # the sweep's run is the base row
    table = (tmp_path / "first" / "table3.md").read_text()
    assert "| d_k=8 | qk_head_dim=8 |" in table and "| 2 |" in table and "Learning rate, chosen once" in table

    # in this process (nothing trains): the second run and the table from the records alone
    main = command_main("table3")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    capsys.readouterr()
    main([*argv[2:], "--output-dir", "second"])
    printed = capsys.readouterr().out
    assert printed.count("(kept in records)") == 6 and "resuming" not in printed
    assert not (tmp_path / "second" / "tokenizer").exists() and not (tmp_path / "second" / "rows").exists()
    assert (tmp_path / "second" / "table3.md").read_text() == table
    main(["--records", "records", "--table-only", "--output-dir", "rendered"])
    assert (tmp_path / "rendered" / "table3.md").read_text() == table
    assert (tmp_path / "rendered" / "table3_curves.png").read_bytes().startswith(b"\x89PNG")


def test_the_command_refuses_records_of_other_settings_and_a_table_without_records(tmp_path, capsys):
    main = command_main("table3")

    preset = get_training_preset("demo")
    RecordFolder(tmp_path / "records", grid_settings(preset, GridSettings()))
    with pytest.raises(SystemExit) as exited:
        main(["--preset", "demo", "--max-steps", "7", "--records", str(tmp_path / "records"),
              "--output-dir", str(tmp_path / "grid")])  # fmt: skip
    assert exited.value.code == 2 and "(preset.max_steps differ)" in capsys.readouterr().err
    assert not (tmp_path / "grid").exists()  # refused before anything was made
    with pytest.raises(SystemExit) as exited:
        main(["--table-only", "--output-dir", str(tmp_path / "table")])
    assert exited.value.code == 2 and "--table-only renders the table from the records" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--lr-factors", "1,1", "--output-dir", str(tmp_path / "grid")])
    assert exited.value.code == 2 and "give different factors" in capsys.readouterr().err


def test_the_paired_bootstrap_interval_of_a_system_against_itself_is_zero_and_a_worse_ones_excludes_zero():
    references = builtin_references()
    base = bleu_statistics(drop_words(references, every=3, keep=0.7), references)
    worse = bleu_statistics(drop_words(references, every=1, keep=0.5), references)
    itself = paired_bootstrap(base, base)
    assert (itself["delta"], itself["low"], itself["high"]) == (0.0, 0.0, 0.0)
    down = paired_bootstrap(base, worse)
    assert down["high"] < 0 and down["low"] <= down["delta"] <= down["high"]
    up = paired_bootstrap(worse, base)  # the other way round: the same distance, above 0
    assert up["low"] > 0 and up["delta"] == pytest.approx(-down["delta"])
    assert paired_bootstrap(base, worse) == down  # seeded: the same interval every time
    # a system as good: 4 sentences of the base's better, 4 worse; its interval holds 0 on both sides
    hypotheses = drop_words(references, every=3, keep=0.7)
    for number in range(0, 24, 3):
        hypotheses[number] = references[number] if number % 2 else " ".join(references[number].split()[:2])
    near = paired_bootstrap(base, bleu_statistics(hypotheses, references))
    assert near["low"] < 0 < near["high"] and agreement(-0.9, near["low"], near["high"]) == "unclear"
    with pytest.raises(ValueError, match="do not pair"):
        paired_bootstrap(base, worse[:-1])


def test_the_agreement_rule_on_constructed_cases():
    assert agreement(-0.9, -3.0, -1.0) == "agree"  # both worse
    assert agreement(+0.4, +0.2, +1.5) == "agree"  # both better
    assert agreement(-0.9, +0.5, +2.0) == "disagree"  # the paper: worse; we: better
    assert agreement(+0.4, -2.0, -0.1) == "disagree"
    assert agreement(-0.9, -1.0, +0.5) == "unclear"  # the paper sees a difference, our interval holds 0
    assert agreement(0.0, -0.4, +0.4) == "agree"  # neither sees one
    assert agreement(0.0, +0.2, +0.9) == "disagree"  # we see one where the paper's Δ is 0
    assert agreement(None, -3.0, -1.0) == "" and agreement(-0.9, None, None) == ""
    # the paper's A h=1/2 is 25.5 against 25.8: its Δ is -0.3 (not -0.30000000000000071), within the noise
    records = [fake_record("base", "base"), fake_record("A h=1/2", "A", (("encoder_attention_heads", 2),))]
    line = table_rows(records)[1]
    assert line["paper Δ BLEU"] == "-0.3" and line["agrees with paper"] == "agree"  # same hypotheses: CI [0, 0]


def curve(*bleus: float, steps: int = 100) -> list[dict]:
    return [{"step": steps * (n + 1) // len(bleus), "bleu": bleu, "loss": 3.0 - n / 10} for n, bleu in enumerate(bleus)]


def fake_record(
    name: str,
    group: str,
    changes: tuple = (),
    seed: int = 0,
    hypotheses: list[str] | None = None,
    **fields,
) -> dict:
    """A row's record as `run_row` writes it, with test hypotheses scored against `builtin_references()` (the
    references themselves unless given)."""
    references = builtin_references()
    hypotheses = references if hypotheses is None else hypotheses
    statistics = bleu_statistics(hypotheses, references)
    record = {
        "row": {"name": name, "group": group, "changes": [list(c) for c in changes], "seed": seed},
        "changes": AblationRow(name, group, changes, seed).describe(),
        "parameters": 2_340_000,
        "train_steps": 100,
        "tokens_per_update": 3000,
        "lr_factor": 0.5,
        "dev_perplexity": 20.0,
        "dev_bleu": bleu_from_statistics(total(statistics)),
        "test_bleu": bleu_from_statistics(total(statistics)),
        "dev_tokenized_bleu": None,
        "test_tokenized_bleu": None,
        "wall_seconds": 60.0,
        "dev_curve": curve(10, 20, 29.8, 30),
        "train_loss": [[25, 5.0], [50, 4.0], [75, 3.5], [100, 3.4]],
        "test_hypotheses": hypotheses,
        "test_bleu_statistics": statistics,
    }
    return json.loads(record_text(record | fields))


def test_curve_status_finds_plateaus_rows_still_rising_and_divergence():
    assert curve_status(fake_record("r", "A")) == ("plateau", "plateau: +0.2 dev BLEU over the last quarter")
    kind, words = curve_status(fake_record("r", "A", dev_curve=curve(5, 10, 15, 21)))
    assert (kind, words) == ("rising", "not at plateau: +6.0 dev BLEU over the last quarter")
    assert curve_status(fake_record("r", "A", dev_curve=curve(29.9, 30)))[0] == "plateau"  # steps 50 and 100
    assert curve_status(fake_record("r", "A", dev_curve=curve(30)))[0] == "unknown"  # one evaluation, at the end
    assert curve_status(fake_record("r", "A", dev_curve=[]))[1] == "0 evaluation(s): too few to tell"
    nan_loss = fake_record("r", "A", train_loss=[[25, 5.0], [50, float("nan")]])
    assert curve_status(nan_loss) == ("diverged", "diverged: loss not finite at step 50")
    collapsed = fake_record("r", "A", dev_curve=curve(10, 25, 3, 1), dev_bleu=0.8)
    assert curve_status(collapsed) == ("diverged", "diverged: dev BLEU fell from 25.0 to 1.0")
    rising_loss = fake_record("r", "A", train_loss=[[25, 5.0], [50, 3.0], [75, 6.0], [100, 7.5]])
    assert curve_status(rising_loss)[1] == "diverged: training loss rose from 3.00 to 7.50"
    assert curve_status(fake_record("r", "A", dev_perplexity=math.inf))[0] == "diverged"  # kept as null


def test_table_only_a_damaged_or_copied_record_and_an_impossible_row_are_refused_in_one_line(tmp_path, capsys):
    """Issue 55: --table-only writes only into a folder of its own; a damaged record names its file; a copy of a
    record is not a second seed; a row no model can have is refused before any folder is made."""
    main = command_main("table3")
    preset, settings = get_training_preset("demo", max_steps=100), GridSettings(test_split="test2016")
    kept = RecordFolder(tmp_path / "records", grid_settings(preset, settings))
    for record in (fake_record("base", "base"), fake_record("D P_drop=0", "D", (("dropout", 0.0),))):
        kept.keep(record)

    def refused(argv: list[str], expected: str) -> None:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert exited.value.code == 2 and expected in error, error

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "table3.md").write_text("my own table\n")
    refused(["--records", str(kept.folder), "--table-only", "--output-dir", str(mine)], "did not create")
    assert [path.name for path in mine.iterdir()] == ["table3.md"] and (
        mine / "table3.md"
    ).read_text() == "my own table\n"
    main(["--records", str(kept.folder), "--table-only", "--output-dir", str(tmp_path / "table")])
    main(["--records", str(kept.folder), "--table-only", "--output-dir", str(tmp_path / "table")])  # its own again
    main(["--records", str(kept.folder), "--table-only", "--output-dir", str(tmp_path)])  # beside the records
    capsys.readouterr()

    copy = kept.folder / "rows" / "base (copy).json"
    copy.write_text(kept.path("base").read_text())
    refused(["--records", str(kept.folder), "--table-only", "--output-dir", str(tmp_path / "table")], "a copy")
    copy.unlink()
    kept.path("base").write_text('{"row": {"name": "ba')
    refused(
        ["--records", str(kept.folder), "--table-only", "--output-dir", str(tmp_path / "table")],
        f"{kept.path('base')} is not a whole record",
    )

    grid = tmp_path / "grid.json"
    for changes, expected in (
        ({"dropout": 2.0}, "row 'bad' cannot train: dropout=2.0 is out of range"),
        ({"encoder_attention_heads": 3}, "row 'bad' cannot train: its model cannot be built: d_model=128 is not"),
    ):
        grid.write_text(json.dumps([{"name": "bad", "changes": changes}]))
        output = tmp_path / "new-grid"
        refused(["--preset", "demo", "--grid", str(grid), "--output-dir", str(output)], expected)
        assert not output.exists()
