"""Train one joint BPE for both languages (§5.1).

It is saved as a PreTrainedTokenizerFast that AutoTokenizer loads; the command counts the lines with
decode(encode(x)) != x and shows ten.

    vanilla-transformer train-tokenizer --corpus multi30k --vocab-size 8000 --output-dir outputs/tok
"""

import argparse

from .arguments import add_overwrite_argument, add_setting_arguments, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus", default="builtin", help="'multi30k', 'builtin', a folder of {split}.{lang} files or a datasets name"
    )
    parser.add_argument("--dataset-config")
    parser.add_argument("--split", default="train")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    add_setting_arguments(parser, {"vocab_size": "~8000 for Multi30k, 37000 for WMT14 (paper)"}, vocab_size=8000)
    parser.add_argument("--lowercase", action="store_true", help="lowercase every text (the Multi30k literature)")
    parser.add_argument("--output-dir", required=True, type=output_dir)
    add_overwrite_argument(parser)


def run(args: argparse.Namespace) -> None:
    from ..data.corpora import corpus_location, load_corpus
    from ..data.tokenization import round_trip_failures, train_joint_bpe
    from ..files.outputs import check_not_an_input, check_output_folder, staged_folder

    # before the corpus loads: the folder holds no input, and replaces only a tokenizer folder of ours
    check_not_an_input(args.output_dir, [("--corpus", corpus_location(args.corpus))])
    check_output_folder(args.output_dir, "tokenizer", args.overwrite)
    corpus = load_corpus(args.corpus, args.split, args.source_lang, args.target_lang, args.dataset_config)
    pairs = corpus["translation"]
    texts = [pair[args.source_lang] for pair in pairs] + [pair[args.target_lang] for pair in pairs]
    tokenizer = train_joint_bpe(texts, vocab_size=args.vocab_size, lowercase=args.lowercase)
    with staged_folder(args.output_dir, "tokenizer", "train-tokenizer", args.overwrite) as staging:
        tokenizer.save_pretrained(staging)
    failures = round_trip_failures(tokenizer, texts)
    print(
        f"{len(tokenizer)} tokens saved to {args.output_dir}; "
        f"decode(encode(x)) != {'x.lower()' if args.lowercase else 'x'} for {len(failures)} of {len(texts)} lines"
    )
    for number, text, decoded in failures[:10]:
        print(f"  line {number}: {text!r} -> {decoded!r}")
