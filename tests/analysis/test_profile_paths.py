"""display_path / display_paths_in: recorded paths without the recording machine's folders."""

from debugkit.analysis.profile import display_path, display_paths_in


def test_display_path():
    assert display_path("/home/u/.venv/lib/python3.11/site-packages/torch/nn/functional.py") == \
        "torch/nn/functional.py"
    assert display_path("/usr/lib/python3.11/threading.py") == "threading.py"
    assert display_path("/work/wt/i5/examples/digits.py") == "examples/digits.py"
    assert display_path("torch/nn/functional.py") == "torch/nn/functional.py"
    assert display_path("") == "" and display_path(None) == ""


def test_display_paths_in_a_command_and_a_sentence():
    assert display_paths_in("/root/.pyenv/versions/3.11.7/bin/python -m examples.digits --out "
                            "/work/wt/i5/sample_runs/digits-profiled") == \
        "bin/python -m examples.digits --out sample_runs/digits-profiled"
    assert display_paths_in("train (/work/wt/i5/examples/digits.py, lines 94-101)") == \
        "train (examples/digits.py, lines 94-101)"
    assert display_paths_in("see https://example.org/a/b and 3/4") == "see https://example.org/a/b and 3/4"
