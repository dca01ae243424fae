"""Speed and memory beside MarianMTModel and torch.nn.Transformer, and of this model exported to CTranslate2.

Training and generation speed and peak training memory of this model, MarianMTModel (identical dimensions) and
torch.nn.Transformer, and generation speed of this model's CTranslate2 export in float32 and int8;
`scripts/lab/benchmark.py` says what is counted.

    python scripts/benchmark.py                          # the paper's base model, 8k vocabulary, this CPU
    python scripts/benchmark.py --device cuda --dtypes bfloat16
"""

import argparse
import json
import sys
from pathlib import Path

from vanilla_transformer.cli.arguments import (
    comma_separated_choices,
    device,
    int_in_range,
    optional_count,
    output_file_in_existing_folder,
    positive_int,
)
from vanilla_transformer.cli.main import run_script


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lab.benchmark_models import EOS, MODELS, Workloads

    from vanilla_transformer.model.configuration_vanilla_transformer import PRESETS

    parser.add_argument("--preset", default="base", choices=sorted(PRESETS), help="model preset")
    parser.add_argument("--vocab-size", type=int_in_range(EOS + 2), default=8000)
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        type=comma_separated_choices(MODELS),
        help=f"comma-separated subset of {MODELS}",
    )
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per workload and model (median)")
    parser.add_argument("--threads", type=optional_count, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", type=device, help="cpu, cuda, cuda:1, mps")
    parser.add_argument(
        "--dtypes",
        default="float32,bfloat16",
        type=comma_separated_choices(("float32", "bfloat16", "float16")),
        help="comma-separated precisions, each a pass over every workload (bf16: autocast training, bf16 weights "
        "for generation); default float32,bfloat16",
    )
    parser.add_argument("--attn-implementation", default="sdpa", choices=["eager", "sdpa", "flash_attention_2"])
    parser.add_argument("--train-batch-size", type=positive_int, default=Workloads.train_batch_size)
    parser.add_argument("--new-tokens", type=positive_int, default=Workloads.new_tokens)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument(
        "--no-compiled", action="store_true", help="skip decoding with a static cache and torch.compile"
    )
    parser.add_argument(
        "--no-ctranslate2",
        action="store_true",
        help="skip decoding with the model exported to CTranslate2 (float32 and int8; needs the ctranslate2 extra)",
    )
    parser.add_argument(
        "--output", default="benchmark.json", type=output_file_in_existing_folder, help="where the JSON report goes"
    )


def run(args: argparse.Namespace) -> None:
    import torch
    from lab.benchmark import Benchmark, format_table, run_benchmark
    from lab.benchmark_models import Workloads, vanilla_config

    if args.threads:
        torch.set_num_threads(args.threads)
    models = tuple(name.strip() for name in args.models.split(","))
    run = Benchmark(
        vanilla_config(args.preset, args.vocab_size),
        Workloads(train_batch_size=args.train_batch_size, new_tokens=args.new_tokens),
        models=models,
        repeats=args.repeats,
        device=args.device,
        dtypes=tuple(getattr(torch, name.strip()) for name in args.dtypes.split(",")),
        attn_implementation=args.attn_implementation,
        memory=not args.no_memory,
        compiled=not args.no_compiled,
        ctranslate2=not args.no_ctranslate2 and "vanilla" in models,
    )
    report = run_benchmark(run)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(report))
    print(f"report written to {args.output}")


if __name__ == "__main__":
    run_script(sys.modules[__name__])
