"""Training and generation speed and peak training memory: this model beside MarianMTModel (identical dimensions)
and torch.nn.Transformer. See `vanilla_transformer/benchmark.py` for what is counted.

    python scripts/benchmark.py                          # the paper's base model, 8k vocabulary, this CPU
    python scripts/benchmark.py --device cuda --dtype bfloat16
"""

import argparse
import json
from pathlib import Path

import torch

from vanilla_transformer.benchmark import MODELS, Workloads, format_table, run_benchmark, vanilla_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", help="model preset: base, big or multi30k")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {MODELS}")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per workload and model (median)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--attn-implementation", default="sdpa", choices=["eager", "sdpa", "flash_attention_2"])
    parser.add_argument("--train-batch-size", type=int, default=Workloads.train_batch_size)
    parser.add_argument("--new-tokens", type=int, default=Workloads.new_tokens)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--output", default="benchmark.json", help="where the JSON report goes")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = tuple(name.strip() for name in args.models.split(","))
    report = run_benchmark(
        vanilla_config(args.preset, args.vocab_size),
        Workloads(train_batch_size=args.train_batch_size, new_tokens=args.new_tokens),
        models=models,
        repeats=args.repeats,
        device=args.device,
        dtype=getattr(torch, args.dtype),
        attn_implementation=args.attn_implementation,
        memory=not args.no_memory,
    )
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(report))
    print(f"report written to {args.output}")


if __name__ == "__main__":
    main()
