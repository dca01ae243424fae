"""The Table 3 report (§6.2): the paper's numbers, and from a grid's row records (`ablation`) the table beside them
as Markdown, CSV and plots: mean ± sd over seeds, Δ test BLEU against the base row with a 95% confidence interval
(`paired_bootstrap`), whether the paper's Δ agrees (`agreement`) and each row's `curve_status`."""

import csv
import json
import math
import statistics
from pathlib import Path

import numpy as np

from vanilla_transformer.errors import DataError
from vanilla_transformer.files.outputs import staged_file

# Table 3 of the paper: (dev perplexity per wordpiece, dev BLEU on newstest2013, parameters ×10⁶) of each row, base
# model N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, ε_ls=0.1, 100K steps; blank cells are None.
PAPER_BASE = (4.92, 25.8, 65)
PAPER_ROWS = {
    "A h=1": (5.29, 24.9, None),
    "A h=1/2": (5.00, 25.5, None),
    "A h=2": (4.91, 25.8, None),
    "A h=4": (5.01, 25.4, None),
    "B d_k=1/4": (5.16, 25.1, 58),
    "B d_k=1/2": (5.01, 25.4, 60),
    "C N=1/3": (6.11, 23.7, 36),
    "C N=2/3": (5.19, 25.3, 50),
    "C N=4/3": (4.88, 25.5, 80),
    "C d_model=1/2": (5.75, 24.5, 28),
    "C d_model=2": (4.66, 26.0, 168),
    "C d_ff=1/2": (5.12, 25.4, 53),
    "C d_ff=2": (4.75, 26.2, 90),
    "D P_drop=0": (5.77, 24.6, None),
    "D P_drop+0.1": (4.95, 25.5, None),
    "D ε_ls=0": (4.67, 25.3, None),
    "D ε_ls=0.2": (5.47, 25.7, None),
    "E learned positions": (4.92, 25.7, None),
    # Table 3's last row: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps; shown as a reference row when
    # the grid trains none of that name (`table_rows`)
    "big": (4.33, 26.4, 213),
}
PAPER_BIG = "N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps (the paper's; not trained here)"
PAPER_COLUMNS = ("paper PPL", "paper BLEU", "paper params (M)")
# the paired bootstrap: sacreBLEU's own default number of resamples and seed (`sacrebleu.significance`)
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345
# dev BLEU gained over the last quarter of training above which a row is "not at plateau"
PLATEAU_RISE = 0.5
# a paper Δ this small is "no real difference" (Table 3 prints one decimal): our CI containing 0 agrees with it
PAPER_NOISE = 0.3


def bleu_from_statistics(summed: np.ndarray | list[int]) -> float:
    """Corpus BLEU from summed `bleu_statistics`, with sacreBLEU's defaults (4-grams, exp smoothing) that
    `score_translations` uses."""
    from sacrebleu.metrics import BLEU

    summed = [int(value) for value in summed]
    return BLEU.compute_bleu(summed[2:6], summed[6:10], summed[0], summed[1], smooth_method="exp").score


def choose_lr_factor(sweep: list[dict]) -> float:
    """The factor of the sweep's record with the best dev BLEU (the first of equals): chosen once on the base row's
    dev set and kept for every row, as the paper chose its recipe on the base model (§5.3, §6.2)."""
    return max(sweep, key=lambda record: record["dev_bleu"])["lr_factor"]


def paired_bootstrap(
    base_statistics: list[list[int]],
    row_statistics: list[list[int]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """Δ = corpus BLEU of the row − that of the base on the same test sentences, with its 95% confidence interval by
    paired bootstrap resampling (Koehn 2004) of the per-sentence `bleu_statistics`, as `sacrebleu.significance` does:
    the 2.5th and 97.5th percentiles of the resampled Δ (sacreBLEU's paired test gives no interval of Δ)."""
    base, row = np.asarray(base_statistics, dtype=np.int64), np.asarray(row_statistics, dtype=np.int64)
    if base.ndim != 2 or base.shape[1:] != (10,) or base.shape != row.shape:
        raise DataError(
            f"paired bootstrap: statistics of shapes {base.shape} and {row.shape}; both systems need one row of 10 "
            f"numbers per test sentence, of the same sentences (rows scored with another --eval-samples or "
            f"--test-split do not pair)."
        )
    sentences = len(base)
    indices = np.random.default_rng(seed).integers(0, sentences, size=(resamples, sentences))
    drawn = np.zeros((resamples, sentences), dtype=np.int64)  # how often each resample drew each sentence
    np.add.at(drawn, (np.arange(resamples)[:, None], indices), 1)
    deltas = [
        bleu_from_statistics(row_sums) - bleu_from_statistics(base_sums)
        for base_sums, row_sums in zip(drawn @ base, drawn @ row, strict=True)
    ]
    low, high = np.percentile(deltas, [2.5, 97.5])
    delta = bleu_from_statistics(row.sum(0)) - bleu_from_statistics(base.sum(0))
    return {"delta": delta, "low": float(low), "high": float(high), "resamples": resamples, "seed": seed}


def agreement(paper_delta: float | None, low: float | None, high: float | None) -> str:
    """Whether our Δ agrees with the paper's, from our 95% interval [`low`, `high`] (`paired_bootstrap`): "agree"
    when the interval excludes 0 on the side of the paper's Δ, or contains 0 where the paper's |Δ| ≤ `PAPER_NOISE`;
    "disagree" when it excludes 0 on the other side (or where the paper's Δ is 0); "unclear" when it contains 0 but
    the paper's |Δ| is larger (too noisy to tell); "" where there is nothing to compare."""
    if paper_delta is None or low is None or high is None:
        return ""
    if low > 0 or high < 0:
        side = 1 if low > 0 else -1
        return "agree" if side * paper_delta > 0 else "disagree"
    return "agree" if abs(paper_delta) <= PAPER_NOISE else "unclear"


def curve_status(record: dict) -> tuple[str, str]:
    """What a row's curves say, as (kind, words): "diverged", "rising" (dev BLEU gained more than `PLATEAU_RISE` over
    the last quarter of the updates), "plateau", or "unknown" (no evaluation before or none inside the last quarter)."""
    curve, losses = record.get("dev_curve") or [], record.get("train_loss") or []
    broken = [step for step, loss in losses if loss is None]
    broken += [point["step"] for point in curve if point["loss"] is None or point["bleu"] is None]
    if broken:
        return "diverged", f"diverged: loss not finite at step {min(broken)}"
    if record.get("dev_perplexity") is None:
        return "diverged", "diverged: dev perplexity not finite"
    # the curve's own points only: the final score is beam search, perhaps on fewer sentences (--eval-samples)
    bleus = [point["bleu"] for point in curve]
    if bleus and max(bleus) >= 2 and bleus[-1] < max(bleus) / 2:
        return "diverged", f"diverged: dev BLEU fell from {max(bleus):.1f} to {bleus[-1]:.1f}"
    finite = [loss for _, loss in losses]
    if len(finite) >= 2 and finite[-1] > 1.5 * min(finite):
        return "diverged", f"diverged: training loss rose from {min(finite):.2f} to {finite[-1]:.2f}"
    last_quarter = 0.75 * record["train_steps"]
    before = [point for point in curve if point["step"] <= last_quarter]
    inside = [point for point in curve if point["step"] > last_quarter]
    if not before or not inside:
        return "unknown", f"{len(curve)} evaluation(s): too few to tell"
    rise = inside[-1]["bleu"] - before[-1]["bleu"]
    if rise > PLATEAU_RISE:
        return "rising", f"not at plateau: {rise:+.1f} dev BLEU over the last quarter"
    return "plateau", f"plateau: {rise:+.1f} dev BLEU over the last quarter"


def row_status(seeds: list[dict]) -> tuple[str, str]:
    """A row's `curve_status`: that of its first seed that diverged, else seed 0's."""
    statuses = [curve_status(record) for record in seeds]
    return next((status for status in statuses if status[0] == "diverged"), statuses[0])


def variants(records: list[dict]) -> list[list[dict]]:
    """The records grouped by row, its seeds together (seed 0 first), in the order the rows first come; the
    learning-rate sweep's rows are left out (`write_table` shows them apart)."""
    grouped: dict[str, list[dict]] = {}
    for record in records:
        if record["row"]["group"] != "lr":
            key = json.dumps([record["row"]["group"], record["row"]["changes"]])
            grouped.setdefault(key, []).append(record)
    return [sorted(seeds, key=lambda record: record["row"]["seed"]) for seeds in grouped.values()]


def _spread(values: list[float | None], digits: int) -> str:
    """One value, or mean ± sd of several; "—" where a value is missing (not finite: a diverged row)."""
    if not values or any(value is None for value in values):
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table_rows(records: list[dict]) -> list[dict]:
    """The table's cells, one line per row with its seeds together (mean ± sd), then the paper's "big" row as a
    reference when the grid has rows of the paper's Table 3 but no "big" row. Δ is the row's test BLEU minus the base
    row's, both of seed 0; the paper's Δ is its dev BLEU minus its base's 25.8."""
    lines = []
    grouped = variants(records)
    base = next((seeds for seeds in grouped if seeds[0]["row"]["group"] == "base"), None)
    for seeds in grouped:
        first, name = seeds[0], seeds[0]["row"]["name"]
        is_base = seeds is base
        paper = PAPER_BASE if is_base else PAPER_ROWS.get(name, (None, None, None))
        paper_delta = None if is_base or paper[1] is None else round(paper[1] - PAPER_BASE[1], 1)
        pairable = not is_base and base is not None and base[0].get("test_bleu_statistics")
        delta = {"low": None, "high": None}
        if pairable and first.get("test_bleu_statistics"):
            delta = paired_bootstrap(base[0]["test_bleu_statistics"], first["test_bleu_statistics"])
        lines.append(
            {
                "row": name,
                "changes": first["changes"],
                "parameters (M)": f"{first['parameters'] / 1e6:.2f}",
                "train steps": first["train_steps"],
                "dev PPL": _spread([record.get("dev_perplexity") for record in seeds], 2),
                "dev BLEU": _spread([record["dev_bleu"] for record in seeds], 1),
                "test BLEU": _spread([record["test_bleu"] for record in seeds], 1),
                "dev BLEU (tok.)": _spread([record.get("dev_tokenized_bleu") for record in seeds], 1),
                "test BLEU (tok.)": _spread([record.get("test_tokenized_bleu") for record in seeds], 1),
                "seeds": len(seeds),
                "Δ test BLEU, seed 0 [95% CI]": (
                    f"{delta['delta']:+.1f} [{delta['low']:+.1f}, {delta['high']:+.1f}]" if "delta" in delta else ""
                ),
                "paper Δ BLEU": "" if paper_delta is None else f"{paper_delta:+.1f}",
                "agrees with paper": agreement(paper_delta, delta["low"], delta["high"]),
                "curve": row_status(seeds)[1],
                "wall (min)": f"{statistics.mean(record['wall_seconds'] for record in seeds) / 60:.1f}",
            }
            | {column: "" if value is None else value for column, value in zip(PAPER_COLUMNS, paper, strict=True)}
        )
    names = {seeds[0]["row"]["name"] for seeds in grouped}
    if "big" not in names and names & (set(PAPER_ROWS) - {"big"}):
        paper = PAPER_ROWS["big"]
        big = {"row": "big (paper)", "changes": PAPER_BIG, "paper Δ BLEU": f"{paper[1] - PAPER_BASE[1]:+.1f}"}
        lines.append(dict.fromkeys(lines[0], "") | big | dict(zip(PAPER_COLUMNS, paper, strict=True)))
    return lines


def sweep_lines(records: list[dict]) -> list[str]:
    """The learning-rate sweep as Markdown (after the table), or nothing when the grid had none."""
    sweep = [record for record in records if record["row"]["group"] == "lr"]
    if not sweep:
        return []
    chosen = choose_lr_factor(sweep)
    lines = [
        "",
        "Learning rate, chosen once on the base row's dev BLEU (seed 0; the §5.3 rate times the factor):",
        "",
        "| lr factor | dev BLEU | dev PPL | curve | chosen |",
        "|---|---|---|---|---|",
    ]
    for record in sweep:
        lines.append(
            f"| {record['lr_factor']:g} | {record['dev_bleu']:.1f} | {_spread([record.get('dev_perplexity')], 2)} | "
            f"{curve_status(record)[1]} | {'yes' if record['lr_factor'] == chosen else ''} |"
        )
    return lines


def write_curves(records: list[dict], path: Path) -> Path:
    """`table3_curves.png`: one panel per row (the sweep's too) with every seed's dev BLEU curve and seed 0's training
    loss, titled with the row's `row_status`."""
    from matplotlib.figure import Figure

    panels = variants(records) + [[record] for record in records if record["row"]["group"] == "lr"]
    columns = min(4, len(panels))
    lines = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(4.2 * columns, 2.9 * lines))
    axes = figure.subplots(lines, columns, squeeze=False)
    colors = {"diverged": "tab:red", "rising": "tab:orange"}
    for axis, seeds in zip(axes.flat, panels, strict=False):
        for record in seeds:
            curve = [point for point in record.get("dev_curve") or [] if point["bleu"] is not None]
            steps, bleus = [point["step"] for point in curve], [point["bleu"] for point in curve]
            style = {"linewidth": 1.5, "alpha": 1.0} if record is seeds[0] else {"linewidth": 0.8, "alpha": 0.5}
            axis.plot(steps, bleus, marker="o", markersize=3, color="tab:blue", **style)
        losses = [(step, loss) for step, loss in seeds[0].get("train_loss") or [] if loss is not None]
        if losses:
            twin = axis.twinx()
            twin.plot(*zip(*losses, strict=True), color="tab:gray", linewidth=0.8)
            twin.set_ylabel("train loss", fontsize=7, color="tab:gray")
            twin.tick_params(labelsize=7)
        kind, words = row_status(seeds)
        axis.set_title(f"{seeds[0]['row']['name']}\n{words}", fontsize=8, color=colors.get(kind, "black"))
        axis.set_xlabel("update", fontsize=7)
        axis.set_ylabel("dev BLEU (greedy)", fontsize=7)
        axis.tick_params(labelsize=7)
        if not (seeds[0].get("dev_curve") or []):
            axis.text(0.5, 0.5, "no evaluation logged", ha="center", va="center", transform=axis.transAxes)
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    with staged_file(path, flag=path.name, suffix=".png") as staging:
        figure.savefig(staging, dpi=90)
    return path


def write_table(records: list[dict], output_dir: Path) -> dict[str, Path]:
    """`table3.md` (the table, then the learning-rate sweep if any), `table3.csv`, `table3.png` (each row's dev BLEU
    and perplexity, the base's spread as a band) and `table3_curves.png` in `output_dir`, each replaced whole."""
    from matplotlib.figure import Figure

    table = table_rows(records)
    paths = {kind: output_dir / f"table3.{kind}" for kind in ("md", "csv", "png")}
    columns = list(table[0])  # the grid's records hold at least one row besides the sweep's (`table_from_records`)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in cells.values()) + " |" for cells in table]
    with staged_file(paths["md"], flag="table3.md") as staging:
        staging.write_text("\n".join(lines + sweep_lines(records)) + "\n")
    with staged_file(paths["csv"], flag="table3.csv") as staging, open(staging, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(table)

    grouped = variants(records)
    names = [seeds[0]["row"]["name"] for seeds in grouped]
    figure = Figure(figsize=(max(8, 0.45 * len(names) + 2), 7))
    axes = figure.subplots(2, 1, sharex=True)
    base = next((seeds for seeds in grouped if seeds[0]["row"]["group"] == "base"), grouped[0])
    for axis, key, label in ((axes[0], "dev_bleu", "dev BLEU"), (axes[1], "dev_perplexity", "dev perplexity")):
        values = [[record.get(key) for record in seeds if record.get(key) is not None] for seeds in grouped]
        axis.bar(
            range(len(names)),
            [statistics.mean(value) if value else 0 for value in values],
            yerr=[statistics.stdev(value) if len(value) > 1 else 0 for value in values],
            color=["tab:gray" if seeds is base else "tab:blue" for seeds in grouped],
        )
        base_values = [record[key] for record in base if record.get(key) is not None] or [0.0]
        low, high = min(base_values), max(base_values)
        high = high if high > low else low + 1e-9  # a band of one seed, still drawn
        axis.axhspan(low, high, color="tab:orange", alpha=0.3, label=f"base, {len(base)} seed(s): min-max")
        axis.axhline(statistics.mean(base_values), color="tab:orange")
        axis.set_ylabel(label)
        axis.legend(loc="upper right", fontsize=8)
    axes[1].set_yscale("log")  # one diverged row must not flatten the others
    axes[1].set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    figure.tight_layout()
    with staged_file(paths["png"], flag="table3.png", suffix=".png") as staging:
        figure.savefig(staging, dpi=110)
    paths["curves"] = write_curves(records, output_dir / "table3_curves.png")
    return paths
