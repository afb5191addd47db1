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
