"""``Recorder("s3://...")`` never writes a local folder named ``s3:``."""

from __future__ import annotations

import pytest
import torch

from debugkit import Recorder
from debugkit.errors import InvalidInputError
from debugkit.recorder.recorder import MSG_URL_RUN_DIR


def test_a_url_run_dir_is_refused_not_written_as_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "s3://bucket/runs/x"
    with pytest.raises(InvalidInputError, match="debugkit sync RUN s3://bucket/runs/x"):
        Recorder(url, torch.nn.Linear(2, 1))
    assert MSG_URL_RUN_DIR.split(":")[0] == "{value}"
    assert list(tmp_path.iterdir()) == []  # no ./s3:/bucket/runs/x
