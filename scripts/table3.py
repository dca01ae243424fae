"""Re-run the paper's Table 3 (model variations, §6.2) on a preset: one training run per row, one table.

Every row is a run of `vanilla-transformer train` with the preset and the row's changes, trained for the preset's
--max-steps and evaluated as the paper's table is: dev perplexity per wordpiece and dev BLEU with beam 4 and α = 0.6,
without checkpoint averaging; test BLEU is decoded once per row. The built-in grid (`--grid table3`) scales the
paper's rows (A) heads, (B) d_k, (C) depth, width and d_ff, (D) dropout and label smoothing, (E) learned positions to
the preset's model and adds pre-LN; `--grid FILE` runs a JSON list of your own rows:

    [{"name": "h=16", "changes": {"encoder_attention_heads": 16, "decoder_attention_heads": 16}},
     {"name": "no smoothing", "changes": {"label_smoothing": 0.0}}]

It writes rows/<row>/ (each a training run), table3.md, table3.csv, table3.png and table3_curves.png (each row's
dev curve) into --output-dir. Started again with the same --output-dir it skips the rows that are done and resumes a
half-trained one. --jobs N trains N rows at once (on one GPU, CUDA MPS lets their kernels overlap).

The table gives each row's Δ test BLEU against the base row with a 95% interval (paired bootstrap over the test
sentences, seed 0's hypotheses), the paper's Δ and whether the two agree, tokenized BLEU where the corpus has
Multi30k's tok/ references, and whether each row's dev curve reached its plateau or diverged. --lr-factors chooses
the learning rate once, on the base row, as the paper chose its recipe.

--records DIR keeps every finished row's record in DIR/rows/<row>.json beside the grid's settings (DIR/ablation.json),
so that a later run with the same settings, on any machine, trains only the rows DIR lacks; DIR holding records of
other settings is refused. docs/table3.md holds the Multi30k run of the first command below (before records
existed); the second is its converged form, resumable across GPU runs.

    python scripts/table3.py --preset multi30k --max-steps 2000 --max-tokens 8192 --tokens-per-update 8192 \
        --warmup-steps 500 --lr-factor 1.265 --seeds 3 --jobs 11 --threads 1 --test-split test2016 \
        --output-dir table3/multi30k
    python scripts/table3.py --preset multi30k --max-steps 8000 --lr-factors 1.265,2.53,5.06 --seeds 3 \
        --jobs 11 --threads 1 --test-split test2016 --records docs/table3/records --output-dir table3/multi30k-8k
    python scripts/table3.py --records docs/table3/records --table-only --output-dir docs/table3
    python scripts/table3.py --preset demo --max-steps 200 --jobs 2 --threads 1 --output-dir table3/demo
"""

import argparse
import sys

from vanilla_transformer.cli.arguments import (
    add_language_arguments,
    add_typed_preset_arguments,
    existing_file,
    float_list,
    optional_count,
    output_dir,
    positive_int,
)
from vanilla_transformer.cli.main import run_script


def grid(text: str) -> str:
    return text if text == "table3" else existing_file(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_typed_preset_arguments(parser)
    parser.add_argument("--output-dir", required=True, type=output_dir)
    add_language_arguments(parser)
    parser.add_argument(
        "--grid",
        default="table3",
        type=grid,
        help="'table3' (the paper's rows scaled to the preset) or a JSON file of rows",
    )
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="train the base row with this many seeds, then every row within 2 BLEU of the base's mean too",
    )
    parser.add_argument(
        "--lr-factors",
        type=float_list,
        help="learning-rate factors (e.g. 1,2,4) tried on the base row first; every row trains at the best on dev",
    )
    parser.add_argument(
        "--records",
        type=output_dir,
        help="a folder (e.g. docs/table3/records) keeping every finished row's record; its rows are not trained again",
    )
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="write the table from the --records folder alone into --output-dir (nothing trains)",
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="rows trained at once, each in its own process")
    parser.add_argument("--threads", type=optional_count, help="CPU threads per row (default: torch's choice)")
    parser.add_argument("--test-split", default="test", help="the split decoded once per row (Multi30k: test2016)")
    parser.add_argument(
        "--eval-samples", type=optional_count, help="score the first N dev and test pairs only (a quick look)"
    )


def run(args: argparse.Namespace) -> None:
    """Run the grid (or, with --table-only, render its records) and print where the table is."""
    from lab.ablation import check_grid, load_grid, run_grid, table3_grid, table_from_records
    from lab.grid_records import GridSettings, RecordFolder, check_grid_folder, grid_settings

    from vanilla_transformer.data.corpora import corpus_languages
    from vanilla_transformer.errors import UsageError
    from vanilla_transformer.training.presets import preset_from_arguments

    if args.table_only:
        if not args.records:
            raise UsageError("--table-only renders the table from the records of --records DIR: give it.")
        table_from_records(args.records, args.output_dir)
        print(f"the table: {args.output_dir}/table3.md (and .csv, .png, table3_curves.png), from {args.records}")
        return
    factors = tuple(args.lr_factors or ())
    if factors and args.lr_factor is not None:
        raise UsageError("--lr-factors chooses the learning-rate factor on the base row; drop --lr-factor.")
    if any(factor <= 0 for factor in factors) or len(set(factors)) < len(factors):
        raise UsageError(f"--lr-factors {args.lr_factors}: give different factors, each above 0.")
    preset = preset_from_arguments(args)
    rows = table3_grid(preset, args.seeds) if args.grid == "table3" else load_grid(args.grid)
    source_lang, target_lang = corpus_languages(preset.corpus, args.source_lang, args.target_lang)
    settings = GridSettings(source_lang, target_lang, args.test_split, args.eval_samples, args.threads, factors)
    check_grid(preset, rows)  # before any folder is made
    if args.records:  # refused before the output folder is made: records of another recipe are named first
        RecordFolder(args.records, grid_settings(preset, settings))
    check_grid_folder(args.output_dir, preset, settings)
    run_grid(preset, rows, args.output_dir, settings, jobs=args.jobs, records_dir=args.records, seeds=args.seeds)
    print(f"the table: {args.output_dir}/table3.md (and .csv, .png, table3_curves.png)")


if __name__ == "__main__":
    run_script(sys.modules[__name__])
