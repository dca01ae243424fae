"""Check a saved model folder and push it to the Hugging Face Hub.

    vanilla-transformer push model_cards/vanilla-transformer-multi30k-en-de --repo-id your-name/multi30k-en-de
    vanilla-transformer push outputs/multi30k/final --repo-id your-name/multi30k-en-de --dry-run

The folder needs model.safetensors, config.json with an auto_map for AutoConfig, AutoModel and AutoModelForSeq2SeqLM
and its code files, tokenizer files, generation_config.json and a README.md card (a missing one is rendered from the
package's template with the run's scores). The token and endpoint come from HF_TOKEN (or `hf auth login`) and
HF_ENDPOINT.

Only those files are sent (with the weights' shards and .sha256, and results.json); anything else (runs/,
checkpoints, credentials, notes) stays behind, and one line names it. Refused, with every problem listed and nothing
sent: a pickle anywhere in the folder; a file to send that links out of it; weights that fail their .sha256 or hold
NaN or Inf; code files that differ from the installed package's (downloaders run them with trust_remote_code=True)
unless --allow-modified-code.
"""

import argparse

from .arguments import existing_dir, repo_id


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder", type=existing_dir, help="the folder to push (save_pretrained output or a release folder)"
    )
    parser.add_argument("--repo-id", required=True, type=repo_id, help="namespace/name on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repo private (when it does not exist)")
    parser.add_argument("--revision", help="branch to push to, created from main when missing (default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", help="default: 'Upload <folder name>'")
    parser.add_argument(
        "--dry-run", action="store_true", help="check the folder and list the files that would be sent; send nothing"
    )
    parser.add_argument(
        "--allow-modified-code",
        action="store_true",
        help="push code files that differ from the installed package's (downloaders run them with trust_remote_code)",
    )


def run(args: argparse.Namespace) -> None:
    from ..release.hub import plan_push, push_folder

    plan = plan_push(args.folder, args.repo_id, allow_modified_code=args.allow_modified_code)
    if args.dry_run:
        print(f"dry run, nothing was sent: pushing {args.folder} to {args.repo_id} would send", end=" ")
        print("\n".join(plan.listing()))
    for line in plan.notes():
        print(line)
    if args.dry_run:
        return
    commit = push_folder(
        args.folder,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        create_pr=args.create_pr,
        commit_message=args.commit_message,
        allow_modified_code=args.allow_modified_code,
        plan=plan,
    )
    print(f"pushed {args.folder} to {args.repo_id}: commit {commit.oid}")
    if commit.pr_url:
        print(f"pull request {commit.pr_url} (load it with revision={commit.pr_revision!r})")
    print(f'load it: AutoModelForSeq2SeqLM.from_pretrained("{args.repo_id}", trust_remote_code=True)')
