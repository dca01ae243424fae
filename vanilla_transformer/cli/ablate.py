"""Re-run the paper's Table 3 (model variations, §6.2) on a preset: one training run per row, one table.

Every row is a run of `vanilla-transformer train` with the preset and the row's changes, trained for the preset's
--max-steps and evaluated as the paper's table is: dev perplexity per wordpiece and dev BLEU with beam 4 and α = 0.6,
without checkpoint averaging; test BLEU is decoded once per row. The built-in grid (`--grid table3`) scales the
paper's rows (A) heads, (B) d_k, (C) depth, width and d_ff, (D) dropout and label smoothing, (E) learned positions to
the preset's model and adds pre-LN; `--grid FILE` runs a JSON list of your own rows:

    [{"name": "h=16", "changes": {"encoder_attention_heads": 16, "decoder_attention_heads": 16}},
     {"name": "no smoothing", "changes": {"label_smoothing": 0.0}}]

It writes rows/<row>/ (each a training run), table3.md, table3.csv and table3.png into --output-dir. Started again
with the same --output-dir it skips the rows that are done and resumes a half-trained one from its checkpoint.
--jobs N trains N rows at once, each in its own process (on one GPU, CUDA MPS lets their kernels overlap); the
grid's tokenizer is learned once, first. docs/table3.md holds the Multi30k run of the first command below.

    vanilla-transformer ablate --preset multi30k --max-steps 2000 --max-tokens 8192 --tokens-per-update 8192 \
        --warmup-steps 500 --lr-factor 1.265 --seeds 3 --jobs 11 --threads 1 --test-split test2016 \
        --output-dir table3/multi30k
    vanilla-transformer ablate --preset demo --max-steps 200 --jobs 2 --threads 1 --output-dir table3/demo
"""

import argparse

from .arguments import (
    add_language_arguments,
    add_typed_preset_arguments,
    existing_file,
    optional_count,
    output_dir,
    positive_int,
)


def grid(text: str) -> str:
    """A `type=` for `--grid`: 'table3', or a JSON file to read."""
    return text if text == "table3" else existing_file(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The preset and its fields, the grid, and how the rows run."""
    add_typed_preset_arguments(parser)
    parser.add_argument("--output-dir", required=True, type=output_dir)
    add_language_arguments(parser)
    parser.add_argument(
        "--grid",
        default="table3",
        type=grid,
        help="'table3' (the paper's rows scaled to the preset) or a JSON file of rows",
    )
    parser.add_argument("--seeds", type=positive_int, default=1, help="train the base row with this many seeds")
    parser.add_argument("--jobs", type=positive_int, default=1, help="rows trained at once, each in its own process")
    parser.add_argument("--threads", type=optional_count, help="CPU threads per row (default: torch's choice)")
    parser.add_argument("--test-split", default="test", help="the split decoded once per row (Multi30k: test2016)")
    parser.add_argument(
        "--eval-samples", type=optional_count, help="score the first N dev and test pairs only (a quick look)"
    )


def run(args: argparse.Namespace) -> None:
    """Run the grid and print where the table is."""
    from ..data.corpora import corpus_languages
    from ..experiments.ablation import GridSettings, check_output_folder, load_grid, run_grid, table3_grid
    from ..training.presets import preset_from_arguments

    preset = preset_from_arguments(args)
    rows = table3_grid(preset, args.seeds) if args.grid == "table3" else load_grid(args.grid)
    source_lang, target_lang = corpus_languages(preset.corpus, args.source_lang, args.target_lang)
    settings = GridSettings(source_lang, target_lang, args.test_split, args.eval_samples, args.threads)
    check_output_folder(args.output_dir, preset, settings)
    run_grid(preset, rows, args.output_dir, settings, jobs=args.jobs)
    print(f"the table: {args.output_dir}/table3.md (and .csv, .png)")
