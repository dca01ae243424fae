"""The GPU check: one run on one GPU that measures the paper's models at the hardware's speed, in one table.

- **The chip's peak**: the best bf16 FLOP/s of an 8192³ matmul, the denominator of every MFU below.
- **Training step** of `paper-base` and `paper-big` (the paper's sizes and 37,000-token vocabulary), this model beside
  `MarianMTModel` of identical dimensions: bf16 autocast, fused Adam, sdpa, eager and through `torch.compile`. Target
  tokens per second and MFU = matmul FLOPs of forward + backward (`benchmark.training_flops`, on the padded batch)
  per second over the peak.
- **Decoding**: `generate()` with the paper's beam search (beam 4, α = 0.6) on newstest2014 sources, exactly
  `new_tokens` new tokens, in bf16; and the same model exported to CTranslate2 (float16 on a GPU, int8 on a CPU).
- **The Table 3 grid's model** (`multi30k`, one batch of padded tokens per update, fp32): tokens per second for the
  whole device (updates × padded tokens), with 1 process and with several at once (on a GPU, start CUDA MPS first to
  let their kernels overlap: `nvidia-cuda-mps-control -d`).

    python scripts/gpu_speed.py --device cuda --sources newstest2014.en --output-dir OUT
    python scripts/gpu_speed.py --device cpu --small  # the same run, tiny, to try it here

It writes `gpu-speed.json` and `gpu-speed.md` (one Markdown table, every figure with its settings) into
`--output-dir`, and with `--docs FILE` puts the table into that file between `<!-- gpu-check -->` markers.
"""

import argparse
import os
import sys
from pathlib import Path

from lab.gpu_speed import GpuCheck, docs_parts, run_check, write_report

from vanilla_transformer.cli.arguments import device, existing_file, output_dir
from vanilla_transformer.cli.main import run_script
from vanilla_transformer.files.outputs import check_output_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", type=device)
    parser.add_argument("--sources", type=existing_file, help="newstest2014.en (one sentence per line)")
    parser.add_argument("--tokenizer", help="the tokenizer for the sources (default: a BPE learned on them)")
    parser.add_argument("--output-dir", type=output_dir, default=os.environ.get("OUT", "outputs/gpu-speed"))
    parser.add_argument("--docs", type=existing_file, help="a Markdown file with two <!-- gpu-check --> lines")
    parser.add_argument("--small", action="store_true", help="tiny sizes: try the whole run on a CPU in a minute")


def run(args: argparse.Namespace) -> None:
    """Check every argument, then measure and write the report."""
    from vanilla_transformer.data.text import read_lines
    from vanilla_transformer.data.tokenization import load_tokenizer, train_joint_bpe

    output = Path(args.output_dir)
    check_output_folder(output, "gpu-speed")  # before the measuring: on a GPU, its minutes are the loan's
    docs = Path(args.docs) if args.docs else None
    if docs:
        docs_parts(docs)
    if args.sources:
        sources = read_lines(args.sources)
    else:
        sources = [" ".join(f"word{(i * 7 + j) % 50}" for j in range(5 + i % 20)) for i in range(200)]
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else train_joint_bpe(sources, vocab_size=8000)
    report = run_check(GpuCheck.small() if args.small else GpuCheck(), args.device, sources, tokenizer)
    print(write_report(report, output, docs).read_text())


if __name__ == "__main__":
    run_script(sys.modules[__name__])
