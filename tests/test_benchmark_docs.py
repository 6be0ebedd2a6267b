"""A benchmark's --write-docs: its figures go into a Markdown file between its marker comments,
the rest of the file untouched (benchmarks/_common.py)."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _common():
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE = """# Performance

## Epoch cost

Text before the figures.

<!-- epoch_cost:begin -->
| old | table |
|---|---|
| 1 | 2 |
<!-- epoch_cost:end -->

Text after the figures.

<!-- other:begin -->
| other | figures |
<!-- other:end -->
"""


def test_the_figures_replace_what_lies_between_the_markers(tmp_path):
    common = _common()
    path = tmp_path / "performance.md"
    path.write_text(SAMPLE)
    table = common.markdown_table(["views", "median"], [[3, "34 ms"], [13, "118 ms"]])
    block = common.figures_block("python benchmarks/epoch_cost.py --views 3,13", 1.25, table)
    common.write_docs(str(path), "epoch_cost", block)
    text = path.read_text()
    assert "| old | table |" not in text
    before, rest = text.split("<!-- epoch_cost:begin -->\n")
    inside, after = rest.split("<!-- epoch_cost:end -->\n")
    assert before == SAMPLE.split("<!-- epoch_cost:begin -->\n")[0]
    assert after == SAMPLE.split("<!-- epoch_cost:end -->\n")[1]  # the other markers' figures untouched
    assert inside.endswith("| 13 | 118 ms |\n\n")  # a blank line ends the table before the marker
    assert "| views | median |\n|---|---|\n| 3 | 34 ms |\n" in inside
    # the figures name the command, the machine (the CPU's model and cores) and the load
    first = inside.split("\n")[0]
    assert first.startswith("`python benchmarks/epoch_cost.py --views 3,13` on ")
    assert common.machine() in first and re.search(r"\d+ cores?", common.machine())
    assert "load average 1.2 at the start" in first
    # a second run replaces the first one's figures, nothing else
    common.write_docs(str(path), "epoch_cost", common.figures_block("cmd", 0.5, "| a |\n|---|\n| 2 |"))
    again = path.read_text()
    assert again.count("<!-- epoch_cost:begin -->") == 1 and "| 3 | 34 ms |" not in again and "| 2 |" in again
    assert again.split("<!-- epoch_cost:end -->\n")[1] == after


@pytest.mark.parametrize("text", [
    "no markers at all\n",
    "<!-- epoch_cost:begin -->\nonly the beginning\n",
    "<!-- epoch_cost:end -->\nend before\n<!-- epoch_cost:begin -->\n",
    "<!-- epoch_cost:begin -->\n<!-- epoch_cost:end -->\n<!-- epoch_cost:begin -->\n<!-- epoch_cost:end -->\n",
])
def test_missing_or_repeated_markers_fail_before_the_run(tmp_path, text):
    common = _common()
    path = tmp_path / "performance.md"
    path.write_text(text)
    with pytest.raises(ValueError, match="epoch_cost:begin"):
        common.check_docs(str(path), "epoch_cost")
    assert path.read_text() == text


def test_the_command_leaves_out_where_the_figures_go():
    common = _common()
    argv = ["--views", "3", "--write-docs", "--docs-path", "/tmp/x.md", "--epochs", "3", "--docs-path=/y.md"]
    assert common.command("/repo/benchmarks/epoch_cost.py", argv) == \
        "python benchmarks/epoch_cost.py --views 3 --epochs 3"
