"""Record straight to a URL (``Recorder("s3://bucket/runs/x", ...)``).

Object stores cannot append, and a training step must never wait on the network. So the
Recorder writes the run as usual into a local *spool* folder (``$DEBUGKIT_SPOOL/<name>-<key>``,
default under the system's temporary folder) and a helper process uploads it: ``debugkit
sync SPOOL URL --every S``, the same incremental copy as a hand-started sync (changed
files only, data before the manifest, heartbeats last, so the bucket never shows a run
finished before its rows).

Crash guarantee. Each upload pass copies every flush that completed on the spool. The
helper runs in its own session: when the training process is killed (SIGKILL, OOM
killer, a scheduler's kill of its process group), the helper sees the run's writer gone,
makes a last pass and exits, so the bucket then holds every flush that completed, like a
local run. Only if the whole machine dies is the bucket behind by what the last upload
interval (``flush_every_s`` by default) had not yet copied. :meth:`Uploader.finish`
(called by ``Recorder.close``) waits for the last pass.

The first pass runs before training starts, so a wrong bucket, endpoint or credential is
a clear error at ``Recorder(...)``, not a silent loss hours later.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import DebugkitError, InvalidInputError

MSG_FIRST_UPLOAD = ("{url}: the run could not be uploaded there ({detail}); check the bucket, "
                    "the endpoint and the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                    "AWS_ENDPOINT_URL for S3). The run is being written at {spool}")
MSG_MULTI_NODE = ("{url}: recording straight to a URL works for jobs on one machine; this job "
                  "spans nodes (node rank {node}). Record to a local folder on each node and "
                  "copy it up with `debugkit sync RUN {url} --every 10` (docs/distributed.md)")
MSG_UPLOAD_UNFINISHED = ("{url}: the upload of the run did not finish ({detail}); the complete "
                         "run is at {spool}: finish it with `debugkit sync {spool} {url}`")
#: How long ``close()`` waits for the last upload pass (seconds); ``$DEBUGKIT_UPLOAD_TIMEOUT_S``.
UPLOAD_TIMEOUT_S = 600.0
#: How long the first pass (before training starts) may take (seconds).
FIRST_PASS_TIMEOUT_S = 300.0


def spool_dir(url: str) -> Path:
    """The local folder a run recorded to ``url`` is written to: the same for every process
    of a job on this machine (ranks share it), different for every URL."""
    base = os.environ.get("DEBUGKIT_SPOOL") or os.path.join(tempfile.gettempdir(),
                                                            "debugkit-spool")
    key = hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:12]
    name = url.rstrip("/").rsplit("/", 1)[-1] or "run"
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:80]
    return Path(base).expanduser() / f"{safe}-{key}"


def check_url(url: str) -> None:
    """Refuse a URL this machine cannot write to before any file is written: its fsspec
    backend must be installed (``pip install 'debugkit[s3]'`` for ``s3://``)."""
    from ..location import as_path

    as_path(url)  # MissingDependencyError naming the extra; RunDirError for a bad URL


def _sync_cmd(spool: Path, url: str, every_s: float | None) -> list[str]:
    cmd = [sys.executable, "-m", "debugkit", "sync", str(spool), url]
    return cmd + (["--every", f"{every_s:g}"] if every_s is not None else [])


class Uploader:
    """The helper process that copies the spool to the URL every ``every_s`` seconds."""

    def __init__(self, spool: Path, url: str, every_s: float):
        self.spool, self.url, self.every_s = Path(spool), url, float(every_s)
        self.log = self.spool.parent / f"{self.spool.name}.upload.log"
        self.proc: subprocess.Popen | None = None

    def first_pass(self) -> None:
        """One upload pass, waited for: a bucket that cannot be written fails here."""
        try:
            done = subprocess.run(_sync_cmd(self.spool, self.url, None), capture_output=True,
                                  text=True, timeout=FIRST_PASS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise DebugkitError(MSG_FIRST_UPLOAD.format(
                url=self.url, detail=f"no answer in {FIRST_PASS_TIMEOUT_S:g} s",
                spool=self.spool)) from None
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise DebugkitError(MSG_FIRST_UPLOAD.format(url=self.url, detail=detail[:400],
                                                        spool=self.spool))

    def start(self) -> None:
        """Start the background passes, in a session of their own (a kill of the training
        process group leaves the uploader to make its last pass)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(_sync_cmd(self.spool, self.url, self.every_s),
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def finish(self, timeout_s: float | None = None) -> str | None:
        """Wait for the last pass (the run was just closed); None when it ended well, else
        why not (the message to warn with)."""
        if self.proc is None:
            return None
        if timeout_s is None:
            timeout_s = float(os.environ.get("DEBUGKIT_UPLOAD_TIMEOUT_S") or UPLOAD_TIMEOUT_S)
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            return MSG_UPLOAD_UNFINISHED.format(url=self.url, spool=self.spool,
                                                detail=f"still running after {timeout_s:g} s; "
                                                f"it goes on in the background (log: {self.log})")
        if self.proc.returncode != 0:
            try:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1][:400]
            except (OSError, IndexError):
                tail = f"exit status {self.proc.returncode}"
            return MSG_UPLOAD_UNFINISHED.format(url=self.url, spool=self.spool, detail=tail)
        return None


def refuse_multi_node(url: str, node_rank) -> None:
    if node_rank not in (None, 0, "0"):
        raise InvalidInputError(MSG_MULTI_NODE.format(url=url, node=node_rank))
