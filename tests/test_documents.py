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
