"""Check a saved model folder and push it to the Hugging Face Hub.

Nothing is sent unless the folder is complete and safe.

    vanilla-transformer push model_cards/vanilla-transformer-multi30k-en-de --repo-id your-name/multi30k-en-de

The folder needs model.safetensors (no pickles anywhere), config.json with an auto_map for AutoConfig, AutoModel and
AutoModelForSeq2SeqLM and both code files, tokenizer files, generation_config.json and a README.md card with YAML
metadata; a missing card is rendered from the package's card template with the run's scores and arguments. A folder
that fails gets the list of every problem and nothing is sent. The token and endpoint come from HF_TOKEN (or
`hf auth login`) and HF_ENDPOINT.
"""

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The folder, the repo, and how the commit lands."""
    parser.add_argument("folder", help="the folder to push (save_pretrained output or a release folder)")
    parser.add_argument("--repo-id", required=True, help="namespace/name on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repo private (when it does not exist)")
    parser.add_argument("--revision", help="branch to push to, created from main when missing (default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", help="default: 'Upload <folder name>'")


def run(args: argparse.Namespace) -> None:
    """Check and push; a refused folder or push exits with a one-line reason ("error: ...")."""
    from ..hub import FolderNotReadyError, HubPushError, push_folder

    try:
        commit = push_folder(
            args.folder,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            create_pr=args.create_pr,
            commit_message=args.commit_message,
        )
    except (FolderNotReadyError, HubPushError, ValueError) as error:
        sys.exit(f"error: {error}")
    print(f"pushed {args.folder} to {args.repo_id}: commit {commit.oid}")
    if commit.pr_url:
        print(f"pull request {commit.pr_url} (load it with revision={commit.pr_revision!r})")
    print(f'load it: AutoModelForSeq2SeqLM.from_pretrained("{args.repo_id}", trust_remote_code=True)')
