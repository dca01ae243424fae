"""Score translations with sacreBLEU and chrF on the raw references and, where the official lowercased
Moses-tokenized reference exists, with the tokenized BLEU of the Multi30k literature. Prints the scores and their
signatures as JSON.

Usage, scoring a file of translations:
    python scripts/evaluate_bleu.py --hypotheses hyp.de --references test2016.de \
        [--tokenized-references REF.tok] [--lang de] [--lowercase]
or translating a split with a saved model first:
    python scripts/evaluate_bleu.py --model FOLDER_OR_HUB_ID --split test2016 [--data-dir ../shared/data/multi30k]
        [--source-lang en --target-lang de] [--batch-size 64] [--num-beams 4] [--output-hypotheses FILE]
"""

import argparse
import json

# (named evaluate_bleu.py: a scripts/evaluate.py would shadow the `evaluate` package for every script in this folder)
import vanilla_transformer  # noqa: F401  (registers the Auto classes, so a saved folder loads without remote code)
from vanilla_transformer.evaluation import evaluate_model_on_split, score_files

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hypotheses", help="translations to score, one per line")
    source.add_argument("--model", help="a saved model folder or Hub id whose translations of --split are scored")
    parser.add_argument("--references", help="with --hypotheses: the raw (detokenized, cased) references")
    parser.add_argument("--tokenized-references", help="with --hypotheses: lowercased Moses-tokenized references")
    parser.add_argument("--lang", default="de", help="with --hypotheses: language of the translations (Moses rules)")
    parser.add_argument(
        "--lowercase", action="store_true", help="with --hypotheses: case-insensitive sacreBLEU and chrF"
    )
    parser.add_argument("--split", help="with --model: the split to translate, e.g. test2016, test2017, valid")
    parser.add_argument("--data-dir", default="../shared/data/multi30k", help="folder of {split}.{lang} and tok/")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per generate() call")
    parser.add_argument("--num-beams", type=int, default=4, help="beam size (the paper: 4, §6.1)")
    parser.add_argument("--output-hypotheses", help="with --model: write the translations to this file")
    args = parser.parse_args()

    if args.hypotheses is not None:
        if args.references is None:
            parser.error("--hypotheses needs --references")
        scores = score_files(
            args.hypotheses, args.references, args.tokenized_references, args.lang, lowercase=args.lowercase
        )
    else:
        if args.split is None:
            parser.error("--model needs --split")
        scores = evaluate_model_on_split(
            args.model,
            args.split,
            args.data_dir,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            batch_size=args.batch_size,
            num_beams=args.num_beams,
            output_hypotheses=args.output_hypotheses,
        )
    print(json.dumps(scores, indent=2, ensure_ascii=False))
