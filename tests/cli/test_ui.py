"""`debugkit ui`'s command line: the app's Streamlit config travels as options when the
server runs in the user's folder, and the folder's own config wins."""

from __future__ import annotations

from pathlib import Path

from debugkit.cli.ui import app_config_flags, app_path


def pairs(flags):
    return dict(zip(flags[::2], flags[1::2]))


def test_app_config_is_passed_from_another_folder(tmp_path):
    f = pairs(app_config_flags(app_path(), tmp_path))
    assert f["--server.maxUploadSize"] == "2048"
    assert f["--server.enableXsrfProtection"] == "true"
    assert f["--client.toolbarMode"] == "viewer"
    assert f["--theme.base"] == "light"


def test_the_folders_own_config_wins(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[theme]\nbase = "dark"\n')
    f = pairs(app_config_flags(app_path(), tmp_path))
    assert "--theme.base" not in f and f["--server.maxUploadSize"] == "2048"


def test_nothing_extra_from_the_checkout_itself():
    assert app_config_flags(app_path(), Path(app_path()).parent) == []


def test_info_counts_ranks(tmp_path):
    """`debugkit info` says "ranks: 1" for a single-process run, and lists several."""
    import subprocess
    import sys

    console = Path(sys.executable).with_name("debugkit")
    root = Path(app_path()).parent / "sample_runs"
    one = subprocess.run([str(console), "info", str(root / "digits-mlp")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert "\nranks:   1\n" in one.stdout, one.stdout
    four = subprocess.run([str(console), "info", str(root / "ddp-straggler")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert "\nranks:   4 (0, 1, 2, 3)\n" in four.stdout, four.stdout
