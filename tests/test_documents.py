"""One source for each number: the results the README and the guide give are the releases' `results.json` (which
the cards are rendered from, `tests/release/test_release.py`), and the seeds' mean ± sd is computed from the seeds'
own rows in the training log."""

import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TRAINING_LOG = (ROOT / "docs" / "training-log.md").read_text(encoding="utf-8")


def release(name: str) -> dict:
    folder = ROOT / "model_cards" / name
    record = json.loads((folder / "results.json").read_text())
    alpha = json.loads((folder / "generation_config.json").read_text())["length_penalty"]
    by_alpha = record["training"]["bleu_on_valid_by_length_penalty"]
    record["valid"] = next(bleu for tried, bleu in by_alpha.items() if float(tried) == alpha)  # the α it decodes with
    return record


def table_row(text: str, starts: str) -> list[str]:
    """The cells of the Markdown table row of `text` whose first cell starts with `starts`."""
    [line] = [line for line in text.splitlines() if line.startswith(f"| {starts}")]
    return [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]


def numbers(cells: list[str]) -> list[float]:
    return [float(number) for cell in cells for number in re.findall(r"\d+\.\d+", cell)]


def test_the_readmes_release_row_is_the_releases_results_json():
    record = release("vanilla-transformer-multi30k-en-de")
    results = record["results"]
    expected = [record["valid"]]
    for split in ("test2016", "test2017"):
        expected += [results[split]["tokenized_bleu"], results[split]["sacrebleu"], results[split]["chrf"]]
    row = table_row(README.split("<!-- results-table -->")[1], "the release")
    assert row[1] == f"{record['training']['parameters'] / 1e6:.2f}M"
    assert numbers(row[2:]) == expected


def test_the_seeds_mean_and_sd_are_computed_from_each_seeds_row():
    seeds = [numbers(table_row(TRAINING_LOG, f"seed {seed}")[2:]) for seed in range(4)]
    # the release is seed 0: its row in the log is its results.json
    record = release("vanilla-transformer-multi30k-en-de")
    assert seeds[0][0] == record["valid"] and seeds[0][3] == record["results"]["test2016"]["tokenized_bleu"]
    spread = [(statistics.mean(column), statistics.stdev(column)) for column in zip(*seeds, strict=True)]
    logged = numbers(table_row(TRAINING_LOG, "all four seeds")[1:])
    assert logged == [value for mean, sd in spread for value in (round(mean, 2), round(sd, 2))]
    # the README gives the columns it has of the same: valid BLEU (tok), then each test set's three
    readme = numbers(table_row(README.split("<!-- results-table -->")[1], "the same recipe, all four seeds")[2:])
    kept = [0, 3, 4, 5, 6, 7, 8]  # valid sacreBLEU / chrF are in the log only
    assert readme == [value for index in kept for value in (round(spread[index][0], 2), round(spread[index][1], 2))]


def test_the_tatoeba_figures_of_the_readme_and_the_guide_are_its_results_json():
    record = release("vanilla-transformer-tatoeba-en-zh")
    test = record["results"]["test"]
    sentence = re.search(r"valid sacreBLEU \(zh\) ([\d.]+) .*?test \*\*([\d.]+)\*\*,\s+chrF ([\d.]+)", README, re.S)
    assert [float(value) for value in sentence.groups()] == [record["valid"], test["sacrebleu"], test["chrf"]]
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    assert numbers(table_row(guide, "valid (α chosen here)")[1:]) == [record["valid"]]
    assert numbers(table_row(guide, "test")[1:]) == [test["sacrebleu"], test["chrf"]]


# -- paper.md, guide.md, speed.md, table3.md: each number against the file it comes from -----------------------------

DOCS = ROOT / "docs"


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_paper_md_gives_the_multi30k_releases_recipe_and_decoding():
    record = release("vanilla-transformer-multi30k-en-de")
    recipe, training = record["training"]["hyperparameters"], record["training"]
    paper = doc("paper.md")
    schedule = re.search(r"Multi30k: factor ([\d.]+), peak ([\d.e-]+) at warmup ([\d,]+) with d_model (\d+)", paper)
    factor, peak, warmup, d_model = schedule.groups()
    assert (float(factor), int(warmup.replace(",", "")), int(d_model)) == (
        recipe["lr_factor"],
        recipe["warmup_steps"],
        recipe["d_model"],
    )
    assert float(peak) == round(recipe["lr_factor"] * recipe["d_model"] ** -0.5 * recipe["warmup_steps"] ** -0.5, 3)
    averaged = re.search(r"the Multi30k release: the last (\d+) of ([\d,]+) updates, one every (\d+)", paper)
    steps = [int(name.split("-")[1]) for name in training["averaged_checkpoints"]]
    assert [int(value.replace(",", "")) for value in averaged.groups()] == [
        len(steps),
        training["updates"],
        steps[1] - steps[0],
    ]
    alpha = json.loads(
        (ROOT / "model_cards" / "vanilla-transformer-multi30k-en-de" / "generation_config.json").read_text()
    )
    assert f"the Multi30k release's α = {alpha['length_penalty']}," in paper
    assert f"{training['parameters'] / 1e6:.2f}M parameters" in paper


def test_guide_md_gives_the_bf16_decoding_shift_the_training_log_measured():
    test2016 = release("vanilla-transformer-multi30k-en-de")["results"]["test2016"]
    logged = re.search(
        r"scores ([\d.]+) sacreBLEU / ([\d.]+) tokenized BLEU on test2016 against ([\d.]+) / ([\d.]+)", TRAINING_LOG
    )
    bf16_sacre, bf16_tok, sacre, tok = (float(value) for value in logged.groups())
    assert (sacre, tok) == (test2016["sacrebleu"], test2016["tokenized_bleu"])
    guide = re.search(
        r"sacreBLEU by \+([\d.]+) and its tokenized BLEU by \+([\d.]+) "
        r"\(([\d.]+) / ([\d.]+) against ([\d.]+) /\s+([\d.]+)",
        doc("guide.md"),
    )
    assert [float(value) for value in guide.groups()] == [
        round(bf16_sacre - sacre, 2),
        round(bf16_tok - tok, 2),
        bf16_sacre,
        bf16_tok,
        sacre,
        tok,
    ]


def speed_table() -> dict[str, list[str]]:
    """docs/speed.md's CPU benchmark table: workload -> cells, and "header" -> the column names."""
    text = doc("speed.md").split("## On a CPU")[1].split("## CTranslate2")[0]
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines}
    rows["header"] = rows.pop("workload")
    return rows


def test_speed_md_prose_and_the_readme_give_the_ratios_of_its_table():
    table = speed_table()
    column = {name: index for index, name in enumerate(table["header"])}
    workloads = ["train", "greedy_b1", "greedy_b32", "beam4_b8"]

    def ratio(row: str, name: str) -> float:
        return float(table[row][column[name]].rstrip("×"))

    def rate(row: str, name: str) -> float:
        return float(table[row][column[f"{name} tok/s (% of peak)"]].split()[0].replace(",", ""))

    fp32 = [ratio(row, "vanilla / marian") for row in workloads]
    bf16 = [ratio(row, "vanilla_bf16 / marian_bf16") for row in workloads]
    prose = doc("speed.md")
    assert f"({min(fp32):.2f}–{max(fp32):.2f}× in fp32, {min(bf16):.2f}–{max(bf16):.2f}× in bf16)" in prose
    assert f"({min(fp32):.2f}–{max(fp32):.2f}× in fp32)" in " ".join(README.split())  # across a line break
    assert f"autocast trains {ratio('train', 'vanilla_bf16 / vanilla'):.2f}× faster" in prose
    compiled = rate("train", "vanilla_compiled") / rate("train", "vanilla")
    compiled_bf16 = rate("train", "vanilla_compiled_bf16") / rate("train", "vanilla_bf16")
    assert f"({compiled:.2f}× eager in fp32, {compiled_bf16:.2f}× in bf16)" in prose
    int8 = [ratio(row, "ctranslate2_int8 / vanilla") for row in workloads[1:]]
    assert "int8 decodes {:.2f}× (greedy, batch 1), {:.2f}× (batch 32) and {:.2f}× (beam 4)".format(*int8) in prose
    repeats = re.search(r"`sdpa`; (\d+) repeats", prose).group(1)
    assert f"--repeats {repeats} " in prose  # the command is the one that made the table


def test_table3_md_prose_gives_the_seed_statistics_and_the_wall_times_of_its_table():
    text = doc("table3.md")
    rows = {line.split("|")[1].strip(): line.strip().strip("|").split("|") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("|---") and not line.startswith("| row")}  # fmt: skip
    dev_ppl, dev_bleu, wall = 4, 5, 7
    seeds = [rows[name] for name in ("base", "base seed 1", "base seed 2")]
    bleu = [float(row[dev_bleu]) for row in seeds]
    ppl = [float(row[dev_ppl]) for row in seeds]
    mean, sd = statistics.mean(bleu), statistics.stdev(bleu)
    stated = f"{mean:.2f} ± {sd:.2f}"
    assert f"dev BLEU {stated} and dev perplexity {statistics.mean(ppl):.2f} ± {statistics.stdev(ppl):.2f}" in text
    assert text.count(f"against {stated}") >= 4  # every row's comparison uses the same base statistics
    walls = [float(row[wall]) for row in rows.values() if row[wall].strip()]
    assert f"Rows took {min(walls)} to {max(walls)} min inside their wave" in text
    d_k = float(rows["B d_k=1/4"][dev_bleu])
    assert f"Its BLEU is {mean - d_k:.2f} lower ({d_k} against {stated}, about {(mean - d_k) / sd:.1f} standard" in text


def test_paper_md_gives_the_releases_vocabulary_and_update_size():
    paper = doc("paper.md")
    recipes = [
        release(name)["training"]["hyperparameters"]
        for name in ("vanilla-transformer-multi30k-en-de", "vanilla-transformer-tatoeba-en-zh")
    ]
    assert recipes[0]["vocab_size"] == recipes[1]["vocab_size"]
    assert f"{recipes[0]['vocab_size']:,} tokens for the Multi30k and Tatoeba releases" in paper
    assert f"`--tokens-per-update` ({recipes[0]['tokens_per_update'] // 1024}k for the Multi30k release)" in paper
    model = recipes[0]
    shape = (
        f"d_model {model['d_model']}, {model['encoder_layers']}+{model['decoder_layers']} layers, "
        f"d_ff {model['encoder_ffn_dim']}, {model['encoder_attention_heads']} heads, dropout {model['dropout']}"
    )
    assert shape in paper
