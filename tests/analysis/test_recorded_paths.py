"""recorded_roots / display_path / display_paths_in: a run's recorded paths without the
recording machine's folders (the pages' view; tests/app/test_recorded_paths.py)."""

from debugkit.analysis.recorded_paths import display_path, display_paths_in, recorded_roots

MANIFEST = {
    "code": {"model_factory": {"module": "examples.digits", "file": "/home/alice/proj/examples/digits.py"},
             "step_fn": {"module": "mypkg", "file": "/home/alice/proj/src/mypkg/__init__.py"}},
    "env": {"cwd": "/home/alice", "argv": ["/home/alice/proj/scripts/train.py", "--out", "/data/r"],
            "executable": "/home/alice/.venv/bin/python"},
}


def test_the_roots_come_from_the_modules_first_then_the_folders():
    assert recorded_roots(MANIFEST) == ("/home/alice/proj/src", "/home/alice/proj", "/home/alice",
                                        "/home/alice/proj/scripts", "/home/alice/.venv")
    failure = {"code": {"model_factory": {"module": "a.b", "file": "/srv/x/a/b.py"}}}
    assert recorded_roots({}, failure) == ("/srv/x",)
    # a file that does not match its module tells nothing; "/" is never a root
    assert recorded_roots({"code": {"m": {"module": "a.b", "file": "/x/c/b.py"}},
                           "env": {"cwd": "/", "executable": "/usr/bin/python3"}}) == ("/usr",)
    assert recorded_roots(None) == ()


def test_display_path():
    roots = recorded_roots(MANIFEST)
    assert display_path("/home/alice/proj/examples/digits.py", roots) == "examples/digits.py"
    assert display_path("/home/alice/proj/examples/digits.py:64", roots) == "examples/digits.py:64"
    assert display_path("/home/alice/proj/src/mypkg/model.py", roots) == "mypkg/model.py"
    assert display_path("/home/alice/.venv/lib/python3.11/site-packages/torch/nn/functional.py",
                        roots) == "torch/nn/functional.py"
    assert display_path("/usr/lib/python3.11/threading.py", roots) == "threading.py"
    assert display_path("/opt/elsewhere/secret/util.py", roots) == "util.py"  # no root: its name
    assert display_path("C:\\Users\\alice\\proj\\train.py", ("C:/Users/alice/proj",)) == "train.py"
    assert display_path("examples/digits.py", roots) == "examples/digits.py"
    assert display_path(None) == "" and display_path("") == ""


def test_display_paths_in_a_traceback_and_a_sentence():
    roots = recorded_roots(MANIFEST)
    tb = ('Traceback (most recent call last):\n'
          '  File "/home/alice/proj/examples/digits.py", line 54, in train\n'
          '  File "/home/alice/My Project/x.py", line 3, in f\n'
          '  File "<frozen runpy>", line 88, in _run_code\n')
    assert display_paths_in(tb, roots) == (
        'Traceback (most recent call last):\n'
        '  File "examples/digits.py", line 54, in train\n'
        '  File "My Project/x.py", line 3, in f\n'  # relative to the working folder
        '  File "<frozen runpy>", line 88, in _run_code\n')
    assert display_paths_in("No such file: '/home/alice/proj/data/train.csv' (see "
                            "https://example.org/a/b, loss/train, 1/2)", roots) == \
        "No such file: 'data/train.csv' (see https://example.org/a/b, loss/train, 1/2)"
    assert display_paths_in("train (/home/alice/proj/examples/digits.py:108)", roots) == \
        "train (examples/digits.py:108)"
    assert display_paths_in("--- base: /a/b/c.py\n+++ run: /home/alice/proj/c.py", roots) == \
        "--- base: c.py\n+++ run: c.py"
    assert display_paths_in("at /home/alice/My Project/x.py:3", ("/home/alice/My Project",)) == "at x.py:3"
    assert display_paths_in(None) == ""


def test_a_path_under_no_root_may_be_named_by_the_server():
    """``unknown``: the server's naming of its served folders (pages._ui.visitor_text) for
    a path under none of the recorded roots; an absolute answer is not used."""
    named = {"/srv/runs/r/x.json": "runs/r/x.json"}
    assert display_paths_in("bad file /srv/runs/r/x.json and /opt/y.py", (),
                            unknown=lambda p: named.get(p, p)) == "bad file runs/r/x.json and y.py"
