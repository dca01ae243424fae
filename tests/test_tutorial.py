"""docs/tutorial.ipynb runs top to bottom with every check passing, and the committed copy shows what it computes.

Every check in the notebook runs twice, on the package's code and on a deliberately broken variant of it, and passes
only if it holds for the first and fails for the second; each check's line says so ("broken variant caught").

`VANILLA_TRANSFORMER_WRITE_TUTORIAL=1 pytest tests/test_tutorial.py` writes the executed notebook back to docs/, so
that the committed outputs (and figures) are the ones this test produced.
"""

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def stdout_lines(notebook: nbformat.NotebookNode) -> list[str]:
    return [
        line
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.output_type == "stream" and output.name == "stdout"
        for line in output.text.splitlines()
    ]


def check_lines(notebook: nbformat.NotebookNode) -> list[str]:
    return [line for line in stdout_lines(notebook) if line.startswith(("✓ ", "✗ "))]


def checks(notebook: nbformat.NotebookNode) -> list[str]:
    """What each check compared, without the measured numbers (they may differ in the last digits by machine)."""
    return [line.split("  [")[0] for line in check_lines(notebook)]


def assert_every_check_caught_its_broken_variant(notebook: nbformat.NotebookNode) -> None:
    total, passed = summary(notebook)
    lines = check_lines(notebook)
    assert total == passed == len(lines) >= 70
    assert all(line.startswith("✓ ") for line in lines)
    # each check ran on a deliberately broken variant too (a wrong constant, a missing mask, ...) and rejected it
    assert all(line.endswith("; broken variant caught]") for line in lines), [
        line for line in lines if not line.endswith("; broken variant caught]")
    ]


def summary(notebook: nbformat.NotebookNode) -> tuple[int, int]:
    found = [re.fullmatch(r"(\d+) checks, (\d+) passed", line) for line in stdout_lines(notebook)]
    total, passed = next(match.groups() for match in found if match)
    return int(total), int(passed)


def test_the_tutorial_runs_and_every_check_passes(monkeypatch):
    # one thread in the kernel, as in each pytest worker (conftest.py): on two cores beside the other worker's tests,
    # two threads would wait for each other (the notebook took 270 s instead of 40 beside the FSDP tests)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # a failed check is an assert in its cell: execute() raises CellExecutionError naming it
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK.parent}}
    )
    client.execute()
    assert_every_check_caught_its_broken_variant(notebook)
    if os.environ.get("VANILLA_TRANSFORMER_WRITE_TUTORIAL") == "1":
        nbformat.write(notebook, NOTEBOOK)
    else:  # the committed outputs come from this notebook as it is: the same checks, in the same order
        assert checks(nbformat.read(NOTEBOOK, as_version=4)) == checks(notebook)


def test_the_committed_tutorial_shows_its_outputs_and_is_linked():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    # run once, top to bottom, in one kernel; nothing failed
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = [output for cell in code for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    figures = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(figures) >= 15  # every picture rendered where GitHub and the Hub show the notebook
    assert_every_check_caught_its_broken_variant(notebook)
    assert "](docs/tutorial.ipynb)" in (ROOT / "README.md").read_text()
    for card in (ROOT / "model_cards").glob("*/README.md"):
        assert "](../../docs/tutorial.ipynb)" in card.read_text(), card
