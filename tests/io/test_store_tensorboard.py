"""A TensorBoard log folder with train/ and validation/ sub-folders (Keras and Lightning
write them so) is listed as a run when its parent is served (issue 17, item 9)."""

from __future__ import annotations

import math

import numpy as np

from debugkit.io.run import open_run
from debugkit.io.served_runs import find_runs, resolve_run


def write_tb(root):
    from torch.utils.tensorboard import SummaryWriter

    for sub, scale in (("train", 1.0), ("validation", 1.2)):
        w = SummaryWriter(str(root / sub), flush_secs=1)
        for s in range(5):
            w.add_scalar("loss", scale * math.exp(-s / 3), s)
        w.close()


def test_tensorboard_folder_with_sub_folders_is_listed(tmp_path):
    served = tmp_path / "logs"
    write_tb(served / "keras-exp")
    (served / "empty").mkdir()
    (served / "notes").mkdir()
    (served / "notes" / "a.txt").write_text("not a run")
    ids = [e.id for e in find_runs([served])]
    assert ids == ["keras-exp.train", "keras-exp.validation"]
    train = open_run(resolve_run("keras-exp.train", [served]).path).scalars()
    val = open_run(resolve_run("keras-exp.validation", [served]).path).scalars()
    assert len(train) == len(val) == 5 and train["value"].max() == 1.0 and val["value"].max() == np.float32(1.2)  # TensorBoard stores float32
    # the log folder itself is not changed (converted into the cache)
    assert sorted(p.name for p in (served / "keras-exp").iterdir()) == ["train", "validation"]


def test_a_served_root_that_is_itself_a_tensorboard_folder(tmp_path):
    write_tb(tmp_path / "tb")
    assert [e.id for e in find_runs([tmp_path / "tb"])] == ["train", "validation"]
    (tmp_path / "flat").mkdir()
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "flat"))
    w.add_scalar("loss", 1.0, 0)
    w.close()
    assert [e.id for e in find_runs([tmp_path / "flat"])] == ["flat"]
