"""The package's refusals: a `VanillaTransformerError` (a `ValueError`, so that callers who catch `ValueError` keep
catching every refusal) whose message names the problem and the fix; a subclass says which stage refused and keeps
the built-in type a caller may expect (`OSError` for a missing download, `ImportError` for a missing package). The
command line prints it as `error: ...` and exits with status 2; any other exception is a bug (docs/reliability.md).
"""


class VanillaTransformerError(ValueError):
    """A refusal of this package; the message names the problem and the fix."""


class UsageError(VanillaTransformerError):
    """Command-line arguments that parse but do not go together: the command prints its usage and this message."""


class SettingsError(VanillaTransformerError):
    """Run settings that cannot finish as asked; the message names the flags and the fix."""


class DataError(VanillaTransformerError):
    """A corpus, split, text file or grid file that cannot be used as given."""


class Multi30kUnavailable(DataError, OSError):
    """The Multi30k files are neither on this machine nor downloadable now; the message says how to get them."""


class ModelFolderError(VanillaTransformerError):
    """A saved model folder or checkpoint that cannot be loaded safely; the message names the file and the fix."""


class ExportError(ModelFolderError):
    """A model CTranslate2 cannot run as it is; the message names the field and what to do."""


class CTranslate2Unavailable(VanillaTransformerError, ImportError):
    """The optional `ctranslate2` package is not installed; the message says how to install it."""


class OutputError(VanillaTransformerError):
    """An output that would destroy an input, or a folder the command did not create; the message names both paths."""


class FolderNotReadyError(ModelFolderError):
    """A folder that would make an incomplete or unsafe Hub repo; `problems` lists every one of them."""

    def __init__(self, folder: object, problems: list[str]):
        self.problems = problems
        if len(problems) == 1:  # one problem, one line (each problem names the file and the fix)
            super().__init__(f"{folder} is not ready for the Hub; nothing was pushed: {problems[0]}")
            return
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(
            f"{folder} is not ready for the Hub ({len(problems)} problem(s)); nothing was pushed:\n{lines}"
        )


class HubPushError(VanillaTransformerError, RuntimeError):
    """The Hub refused a push (token, repo, branch); the message says why and what to do."""
