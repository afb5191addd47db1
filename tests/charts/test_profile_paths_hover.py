"""The flamegraph's hover names a frame's file relative to the run's recorded roots: a
script at the project's top level is ``train.py``, not ``secret-project/train.py``."""

import pandas as pd

from debugkit.charts.profile import _hover_text


def test_the_hover_is_relative_to_the_recorded_roots():
    tree = pd.DataFrame({"file": ["/home/alice/secret-project/train.py",
                                  "/home/alice/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
                                  "/opt/other/tool/x.py"],
                         "line": [12, 1751, None]})
    roots = ("/home/alice/secret-project",)
    assert _hover_text(tree, roots) == ["train.py:12", "torch/nn/modules/module.py:1751", "tool/x.py"]
    # without roots, as before: an absolute path's last two parts
    assert _hover_text(tree)[0] == "secret-project/train.py:12"
