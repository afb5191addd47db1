"""A small HTTP inference service recorded with ``debugkit.serve``, and the traffic that
breaks it: one handler leaks, two requests are bad.

The service is the standard library's ``ThreadingHTTPServer`` (one thread per request,
like most Python model servers under load; no dependency to install) serving a tiny
next-token model on loopback:

- ``POST /v1/score``     ``{"input_ids": [[...]]}`` -> the next token at each position;
- ``POST /v1/generate``  the same plus ``temperature``; this handler keeps every output
  in a module-level ``_RECENT`` list "for a debug page" and never trims it: the leak;
- a response cache answers a prompt seen before (``r.fallback("cache")``).

The traffic (``load``) is bounded: ``--requests`` requests from ``--concurrency`` client
threads, prompts of 8-64 tokens; unless ``--healthy``, request 310 carries a token id past
the vocabulary (``IndexError`` in the embedding) and request 705 a temperature of 0 (the
logits divided by zero: Inf/NaN).

    python -m examples.serve_leak --out runs/serve-leak            # service + traffic, then stop
    python -m examples.serve_leak serve --out runs/svc --port-file p   # the service alone
    python -m examples.serve_leak load http://127.0.0.1:PORT          # the traffic alone

The service stops on SIGTERM/SIGINT or ``POST /shutdown`` and closes the run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VOCAB = 512
DIM = 32
BAD_TOKEN_AT = 310
ZERO_TEMPERATURE_AT = 705

_RECENT: list = []  # the leak: every /v1/generate output, kept "for a debug page"


def build_model(vocab: int = VOCAB, dim: int = DIM, seed: int = 0):
    """The served model (rebuilt by replay from this spec): embeddings, a GRU-free mixer
    and per-position logits over the vocabulary, ``[batch, tokens, vocab]``."""
    import torch
    import torch.nn as nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.mix = nn.Linear(dim, dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, input_ids, temperature=None):
            h = torch.tanh(self.mix(self.emb(input_ids)))
            logits = self.head(h)
            return logits if temperature is None else logits / temperature

    torch.manual_seed(seed)
    return TinyLM().eval()


class Service:
    """The model, the recorder and the handlers' logic (no HTTP in here)."""

    def __init__(self, out: str, *, leak: bool = True, name: str | None = None):
        import torch

        import debugkit

        torch.set_num_threads(1)
        self.torch = torch
        self.model = build_model()
        self.leak = leak
        self.rec = debugkit.serve(self.model, out, name=name, model_factory="examples.serve_leak:build_model",
                                  factory_kwargs={"vocab": VOCAB, "dim": DIM, "seed": 0},
                                  hash_weights=True, flush_every_s=0.5,
                                  config={"service": "examples.serve_leak", "leak": leak})
        self.cache: dict = {}
        self.cache_lock = threading.Lock()

    def handle(self, path: str, body: dict) -> tuple[int, dict]:
        torch = self.torch
        try:
            inputs = {"input_ids": torch.tensor(body["input_ids"], dtype=torch.int64)}
            if path == "/v1/generate" and "temperature" in body:
                inputs["temperature"] = torch.tensor(float(body["temperature"]))
        except (KeyError, TypeError, ValueError) as exc:  # not a request for the model
            return 400, {"error": f"bad request body: {exc}"}
        key = (path, json.dumps(body, sort_keys=True))
        try:
            with torch.no_grad(), self.rec.request(inputs, route=path) as r:
                with self.cache_lock:
                    hit = self.cache.get(key)
                if hit is not None:
                    r.fallback("cache")
                    tokens = hit
                else:
                    logits = r.output(self.model(**inputs))
                    if path == "/v1/generate" and self.leak:
                        _RECENT.append(logits)  # the planted leak: never trimmed
                    tokens = logits.argmax(-1).tolist()
        except Exception as exc:  # noqa: BLE001 - the service answers, the recorder captured it
            return 500, {"error": f"{type(exc).__name__}: {exc}", "failure_id": r.failure_id}
        if r.outcome == "nonfinite":
            return 500, {"error": "the model returned NaN/Inf", "failure_id": r.failure_id}
        if hit is None:
            with self.cache_lock:
                self.cache[key] = tokens
        return 200, {"tokens": tokens, "request": r.request}


def make_server(service: Service, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

        def log_message(self, *args):  # quiet
            pass

        def do_POST(self):  # noqa: N802 - http.server's name
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path == "/shutdown":
                self._send(200, {"ok": True})
                threading.Thread(target=server.shutdown, daemon=True).start()
                return
            if self.path not in ("/v1/score", "/v1/generate"):
                self._send(404, {"error": f"no such endpoint {self.path}"})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": "the body is not JSON"})
                return
            status, doc = service.handle(self.path, body)
            self._send(status, doc)

        def _send(self, status: int, doc: dict):
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def serve(out: str, *, port: int = 0, port_file: str | None = None, leak: bool = True,
          name: str | None = None) -> None:
    """Run the service until SIGTERM/SIGINT or ``POST /shutdown``; then close the run."""
    service = Service(out, leak=leak, name=name)
    server = make_server(service, port)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if port_file:
        tmp = f"{port_file}.tmp"
        Path(tmp).write_text(str(server.server_address[1]))
        os.replace(tmp, port_file)
    print(f"serving on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        service.rec.close()


def traffic(n: int, *, seed: int = 0, healthy: bool = False, repeat_every: int = 25) -> list[tuple[str, dict]]:
    """The bounded request list: ``(path, body)``, half to each endpoint; every
    ``repeat_every``-th request repeats an earlier prompt (a cache hit; none when
    ``healthy``); unless
    ``healthy``, the two planted bad requests."""
    rng = random.Random(seed)
    out: list[tuple[str, dict]] = []
    for i in range(n):
        path = "/v1/generate" if i % 2 else "/v1/score"
        if repeat_every and i > 0 and i % repeat_every == 0:
            out.append(out[rng.randrange(len(out))])
            continue
        length = rng.choice((8, 16, 32, 48, 64))
        ids = [rng.randrange(VOCAB) for _ in range(length)]
        body: dict = {"input_ids": [ids]}
        if path == "/v1/generate":
            body["temperature"] = 0.8
        if not healthy and i == BAD_TOKEN_AT:
            ids[length // 2] = VOCAB + 7  # a token id past the vocabulary
        if not healthy and i == ZERO_TEMPERATURE_AT:
            path, body["temperature"] = "/v1/generate", 0.0
        out.append((path, body))
    return out


def load(url: str, *, requests: int = 1500, concurrency: int = 4, seed: int = 0,
         healthy: bool = False, timeout_s: float = 30.0) -> dict:
    """Send :func:`traffic` to the service at ``url`` from ``concurrency`` threads (each
    with its own keep-alive connection). Returns ``{status: count}`` and the failure ids
    the service answered with."""
    host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
    work = traffic(requests, seed=seed, healthy=healthy, repeat_every=0 if healthy else 25)
    lock = threading.Lock()
    statuses: dict[int, int] = {}
    failures: list[str] = []
    it = iter(work)

    def client():
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                break
            path, body = item
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            doc = json.loads(resp.read())
            with lock:
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                if doc.get("failure_id"):
                    failures.append(doc["failure_id"])
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"statuses": statuses, "failure_ids": sorted(failures)}


def shutdown(url: str) -> None:
    host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/shutdown", "{}")
    conn.getresponse().read()
    conn.close()


def wait_for_port(port_file: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_file.is_file():
            return int(port_file.read_text())
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with status {proc.returncode} before listening")
        time.sleep(0.05)
    raise RuntimeError("the service did not start listening in time")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", default="demo", choices=("demo", "serve", "load"))
    ap.add_argument("url", nargs="?", help="load: the service's http://127.0.0.1:PORT")
    ap.add_argument("--out", default="runs/serve-leak", help="the run directory (demo, serve)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="serve: write the port here once listening")
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--healthy", action="store_true", help="no leak and no bad request")
    ap.add_argument("--name")
    args = ap.parse_args(argv)
    if args.mode == "serve":
        serve(args.out, port=args.port, port_file=args.port_file, leak=not args.healthy, name=args.name)
        return 0
    if args.mode == "load":
        print(json.dumps(load(args.url, requests=args.requests, concurrency=args.concurrency,
                              healthy=args.healthy)))
        return 0
    # demo: the service in its own process, the traffic from this one, then a clean stop
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        cmd = [sys.executable, "-m", "examples.serve_leak", "serve", "--out", args.out,
               "--port-file", str(port_file)] + (["--healthy"] if args.healthy else []) + (
            ["--name", args.name] if args.name else [])
        proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])
        try:
            port = wait_for_port(port_file, proc)
            url = f"http://127.0.0.1:{port}"
            res = load(url, requests=args.requests, concurrency=args.concurrency, healthy=args.healthy)
            print(json.dumps(res))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
