"""Train the Transformer with the paper's recipe (§5) in a plain `accelerate` loop (vanilla_transformer/no_trainer.py),
the counterpart of transformers' `run_translation_no_trainer.py`; `scripts/train.py` runs the same on Seq2SeqTrainer.

    python scripts/train_no_trainer.py --preset demo --output-dir outputs/demo-nt                  # one process
    accelerate launch --num_processes 8 scripts/train_no_trainer.py --preset paper-base --output-dir outputs/base
    torchrun --nproc_per_node 2 scripts/train_no_trainer.py --preset demo --output-dir outputs/demo-nt   # CPU, gloo

Interrupted runs resume from their newest checkpoint-N (accelerate's `load_state`) when started again with the same
--output-dir.
"""

import argparse

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer.no_trainer import train_no_trainer
from vanilla_transformer.recipe import TRAINING_PRESETS, get_training_preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(TRAINING_PRESETS), default="demo")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--corpus", help="'builtin', a folder of {split}.{lang} files, or a datasets name")
    parser.add_argument("--dataset-config", help="the datasets config, e.g. de-en for wmt14")
    parser.add_argument("--valid-split", help="the validation split's name (datasets on the Hub: 'validation')")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--vocab-size", type=int)
    parser.add_argument("--max-tokens", type=int, help="padded source+target tokens per batch and process")
    parser.add_argument("--per-device-batch-size", type=int, help="batches of this many pairs instead of tokens")
    parser.add_argument("--tokens-per-update", type=int, help="accumulation reaches about this many (all processes)")
    parser.add_argument("--gradient-accumulation-steps", type=int, help="instead of --tokens-per-update")
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--lr-factor", type=float, help="multiplies the §5.3 learning rate")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--save-steps", type=int)
    parser.add_argument("--eval-steps", type=int)
    parser.add_argument("--average-last", type=int, help="checkpoints kept (for averaging, §6.1)")
    parser.add_argument("--label-smoothing", type=float)
    parser.add_argument("--dropout", type=float)
    parser.add_argument("--max-length", type=int, help="pairs with more tokens on a side are dropped (and counted)")
    parser.add_argument("--max-grad-norm", type=float, default=0.0, help="clip gradients to this norm (0: never)")
    parser.add_argument(
        "--mixed-precision", choices=["no", "fp16", "bf16"], help="default: accelerate's config or launch flag"
    )
    parser.add_argument("--eval-beams", type=int, default=1, help="beams for validation BLEU during training")
    parser.add_argument("--eval-samples", type=int, help="validate on the first N valid pairs only")
    parser.add_argument("--eval-batch-size", type=int, default=64, help="pairs per process and validation batch")
    parser.add_argument("--train-samples", type=int, help="train on the first N pairs only")
    parser.add_argument("--log-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-resume", action="store_true", help="never resume: stop with an error if --output-dir already holds a run"
    )
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    args = parser.parse_args()

    preset = get_training_preset(
        args.preset,
        corpus=args.corpus,
        dataset_config=args.dataset_config,
        valid_split=args.valid_split,
        vocab_size=args.vocab_size,
        max_tokens=args.max_tokens,
        tokens_per_update=args.tokens_per_update,
        warmup_steps=args.warmup_steps,
        lr_factor=args.lr_factor,
        max_steps=args.max_steps,
        save_steps=args.save_steps,
        eval_steps=args.eval_steps,
        average_last=args.average_last,
        label_smoothing=args.label_smoothing,
        dropout=args.dropout,
        max_length=args.max_length,
    )
    train_no_trainer(
        preset,
        args.output_dir,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        seed=args.seed,
        per_device_batch_size=args.per_device_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_grad_norm=args.max_grad_norm,
        mixed_precision=args.mixed_precision,
        resume=not args.no_resume,
        eval_beams=args.eval_beams,
        eval_samples=args.eval_samples,
        eval_batch_size=args.eval_batch_size,
        train_samples=args.train_samples,
        log_steps=args.log_steps,
        threads=args.threads,
    )


if __name__ == "__main__":
    main()
