"""Open a debugkit run directory (or a .zip of one) and read its tables.

Every table reader returns a pandas DataFrame with documented columns; readers re-read
the files on each call, so a live run shows new rows.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from pathlib import Path

from .. import format as fmt
from .._fsutil import MAX_JSON_BYTES, in_run, loads_capped, process_start_ticks, read_bytes_capped
from ..errors import MSG_TABLE_UNREADABLE, OutsideRunError, RunDirError, TruncatedRecordWarning
from ..location import as_path, is_local
from ..runschema import check as check_schema
from ..runschema import read_run_json
from .arrowio import read_stream
from .fs import child_names, files_signature
from .resolve import resolve_run_path
from .shards import add_shards


def _pid_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    if start_ticks is not None:
        now = process_start_ticks(pid)
        if now is not None and now != start_ticks:
            return False  # the pid was reused by another process
    # A zombie (exited, not yet reaped) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        if data[data.rindex(b")") + 2 : data.rindex(b")") + 3] in (b"Z", b"X"):
            return False
    except (OSError, ValueError):
        pass
    return True


#: Warning (``Run.warnings``) when a later writer session restarted at a step an earlier
#: one had already logged: a script run again into the same folder, or a resumed job.
MSG_ATTEMPT_RESTART = ("rank {rank}: attempt {attempt} (segment {seg:03d}) started at step {step}, "
                       "a step an earlier attempt had logged; the earlier rows from step {step} on "
                       "are superseded (kept on disk; Run.attempts() lists the attempts)")

class Run:
    """A run directory opened for reading. Create with :func:`open_run`.

    Attributes
    ----------
    path : Path
        The run directory.
    manifest : dict
        The manifest (upgraded to the current schema version).
    warnings : list of str
        Problems met while reading that lost no complete record (e.g. a half-written
        last record that was skipped).
    """

    def __init__(self, path: Path, manifest: dict, source: Path | None = None):
        self.path = path
        self.manifest = manifest
        self.source = source or path
        self.warnings: list[str] = []
        if not is_local(path):
            from ..objcache import pack_problems

            problem = pack_problems(path)  # a refused pack.zip: its files were read instead
            if problem:
                self.warnings.append(problem)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, name={self.name!r})"

    # ------------------------------------------------------------------- identity
    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.path.name)

    @property
    def kind(self) -> str:
        """``"inference"`` for a run recorded by :func:`debugkit.serve`, else ``"training"``."""
        return fmt.run_kind(self.manifest)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def ranks(self) -> list[int]:
        return sorted(int(name) for name, is_dir in child_names(self.path / fmt.RANKS_DIR)
                      if is_dir and name.isdigit())

    def _rank_dir(self, rank: int) -> Path:
        return self.path / fmt.RANKS_DIR / str(rank)

    def _segments(self, rank: int, table: str) -> list[tuple[int, Path]]:
        out = []
        d = self._rank_dir(rank)
        for name, is_dir in child_names(d):
            m = None if is_dir else fmt.SEGMENT_FILE.match(name)
            if m and m.group("table") == table and m.group("suffix") == fmt.TABLE_SUFFIX:
                out.append((int(m.group("seg")), d / name))
        return sorted(out)

    def rank_meta(self, rank: int, segment: int | None = None) -> dict:
        """The ``meta-<segment>.json`` of a rank (the first segment by default)."""
        metas = {}
        d = self._rank_dir(rank)
        for name, _ in child_names(d):
            m = fmt.META_FILE.match(name)
            if m:
                metas[int(m.group("seg"))] = d / name
        if not metas:
            return {}
        seg = min(metas) if segment is None else segment
        if seg not in metas:
            return {}
        try:
            return read_run_json(metas[seg], "meta.json")
        except (OSError, ValueError) as exc:
            raise RunDirError(f"{metas[seg]}: unreadable rank metadata ({exc})") from exc

    def layers(self, rank: int | None = None) -> list[str]:
        """Parameter names in model order (without ``__total__``)."""
        ranks = self.ranks if rank is None else [rank]
        for r in ranks:
            meta = self.rank_meta(r)
            if meta.get("layers") is not None:
                return list(meta["layers"])
        return []

    # ------------------------------------------------------------------- status
    def heartbeats(self) -> dict[int, dict]:
        """Each rank's last heartbeat (``{}`` for a rank that has none)."""
        out = {}
        for r in self.ranks:
            p = self._rank_dir(r) / fmt.HEARTBEAT
            try:
                out[r] = read_run_json(p, fmt.HEARTBEAT)
            except (OSError, ValueError):
                out[r] = {}
        return out

    def rank_status(self, rank: int, now: float | None = None) -> str:
        """``running | finished | failed | crashed`` for one rank."""
        hb = self.heartbeats().get(rank, {})
        return self._judge_heartbeat(hb, now)

    @staticmethod
    def _judge_heartbeat(hb: dict, now: float | None = None) -> str:
        state = hb.get("state")
        if state in (fmt.STATE_FINISHED, fmt.STATE_FAILED):
            return state
        if state != fmt.STATE_RUNNING:
            return fmt.STATE_CRASHED
        now = time.time() if now is None else now
        flush = float(hb.get("flush_every_s") or 2.0)
        stale_after = max(fmt.HEARTBEAT_MIN_STALE_S, fmt.HEARTBEAT_STALE_FLUSHES * flush)
        if now - float(hb.get("time") or 0) > stale_after:
            return fmt.STATE_CRASHED
        if hb.get("host") == socket.gethostname() and isinstance(hb.get("pid"), int):
            if not _pid_alive(hb["pid"], hb.get("process_start_ticks")):
                return fmt.STATE_CRASHED
        return fmt.STATE_RUNNING

    @property
    def status(self) -> str:
        """The run's status: ``running | finished | failed | crashed``.

        ``crashed`` means a writer went away without closing (its heartbeat is stale
        or its process is gone). Over ranks: any failed rank makes the run failed, then
        any crashed one crashed, then any running one running.
        """
        states = [self._judge_heartbeat(hb) for hb in self.heartbeats().values()]
        if not states:
            # No rank folder at all. A Recorder writes its manifest (with the model's
            # class) and then its first heartbeat at once, so a Recorder's run without one
            # died in between; a run holding only imported or profiled artifacts (a
            # `debugkit profile` of a script that does not record, a TensorBoard import)
            # has no training writer to wait for.
            return fmt.STATE_CRASHED if "model_class" in self.manifest else fmt.STATE_FINISHED
        for s in (fmt.STATE_FAILED, fmt.STATE_CRASHED, fmt.STATE_RUNNING):
            if s in states:
                return s
        return fmt.STATE_FINISHED

    def checkpoints(self, folder=None):
        """Checkpoints of this run (``rec.checkpoint()``) and plain state_dict files in
        the run directory or ``folder``: DataFrame ``[step, path, bytes, sha256, ok,
        source, problem]`` (see :func:`debugkit.checkpoints.list_checkpoints`)."""
        from ..checkpoints import list_checkpoints

        return list_checkpoints(self.path, folder)

    # ------------------------------------------------------------------- tables
    def _read_table(self, table: str, rank: int):
        """(segment, pyarrow.Table) pairs of one rank's table, in segment order, each
        segment cut where a later attempt took over (see :meth:`attempts`)."""
        out = self._read_raw(table, rank)
        if len(out) < 2:
            return out
        starts = self._segment_starts(rank)
        cut = []
        for seg, t in out:
            later = [s for g, s in starts.items() if g > seg]
            if later and t.num_rows and "step" in t.column_names:
                import pyarrow.compute as pc

                t = t.filter(pc.less(t.column("step"), min(later)))
            cut.append((seg, t))
        return cut

    def _segment_starts(self, rank: int) -> dict[int, int]:
        """``{segment: first step}`` of each of a rank's segments that logged a step."""
        cache = self.__dict__.setdefault("_starts", {})
        if rank not in cache:
            starts = {}
            for seg, t in self._read_raw("steps", rank):
                if t.num_rows:
                    starts[seg] = int(min(t.column("step").to_pylist()))
            cache[rank] = starts
            for seg, first in sorted(starts.items()):
                older = [g for g in starts if g < seg]
                if older and first <= max(self._last_steps(rank, older)):
                    segs = sorted(set(starts) | set(self._meta_segments(rank)))
                    self.warnings.append(MSG_ATTEMPT_RESTART.format(
                        rank=rank, attempt=segs.index(seg) + 1, seg=seg, step=first))
        return cache[rank]

    def _last_steps(self, rank: int, segments: list[int]) -> list[int]:
        return [max(t.column("step").to_pylist()) for g, t in self._read_raw("steps", rank)
                if g in segments and t.num_rows] or [-1]

    def attempts(self, rank: int = 0) -> list[dict]:
        """The writer sessions ("attempts") of one rank, oldest first.

        Each time a Recorder opens the run directory (a resumed job, a restarted worker,
        or a script run again into the same folder) it writes a new segment. The attempt
        that starts at step ``S`` takes over from ``S`` on: rows of earlier attempts with
        ``step >= S`` are superseded and left out of every table (as TensorBoard purges
        events after a restart), but stay on disk. A script run again from step 0 thus
        shows only its own rows, not a second copy of every step.

        Returns
        -------
        list of dict
            ``attempt`` (1-based), ``segment``, ``first_step`` and ``last_step`` (None
            when the attempt logged no step), ``superseded_from`` (the step from which a
            later attempt replaced this one's rows, or None).
        """
        starts = self._segment_starts(rank)
        segs = sorted({seg for seg, _ in self._read_raw("steps", rank)}
                      | set(self._meta_segments(rank)))
        out = []
        for i, seg in enumerate(segs):
            steps = [v for g, t in self._read_raw("steps", rank) if g == seg
                     for v in t.column("step").to_pylist()]
            later = [s for g, s in starts.items() if g > seg]
            out.append({"attempt": i + 1, "segment": seg,
                        "first_step": min(steps) if steps else None,
                        "last_step": max(steps) if steps else None,
                        "superseded_from": min(later) if later and steps and max(steps) >= min(later)
                        else None})
        return out

    def _meta_segments(self, rank: int) -> list[int]:
        d = self._rank_dir(rank)
        if not d.is_dir():
            return []
        return sorted(int(m.group(1)) for p in d.iterdir()
                      if (m := fmt.META_FILE.match(p.name)))

    def _read_raw(self, table: str, rank: int):
        """(segment, pyarrow.Table) pairs of one rank's table as stored, in segment order."""
        schema = fmt.table_schema(table)
        out = []
        for seg, path in self._segments(rank, table):
            try:
                res = read_stream(path, schema)
            except OSError as exc:
                raise RunDirError(MSG_TABLE_UNREADABLE.format(path=path, table=table, detail=exc)) from exc
            if res.table is None:
                continue
            if res.truncated:
                msg = (f"{path}: skipped a half-written record after "
                       f"{res.table.num_rows} complete rows ({res.detail})")
                self.warnings.append(msg)
                if self.status != fmt.STATE_RUNNING:
                    warnings.warn(msg, TruncatedRecordWarning, stacklevel=3)
            out.append((seg, res.table))
        return out

    def _frame(self, table: str, rank: int | None, columns: list[str]):
        import pyarrow as pa

        parts = []
        for r in self.ranks if rank is None else [rank]:
            for _, t in self._read_table(table, r):
                if t.num_rows:
                    parts.append(t.append_column("rank", pa.array([r] * t.num_rows, pa.int32())))
        if not parts:
            schema = fmt.table_schema(table).append(pa.field("rank", pa.int32()))
            df = schema.empty_table().to_pandas()
        else:
            df = pa.concat_tables(parts).to_pandas()
        return df[columns]

    def scalars(self, rank: int | None = None):
        """Logged scalars (loss, learning rates, ...).

        Returns
        -------
        DataFrame with columns ``step`` (int64), ``rank`` (int32), ``key`` (str),
        ``value`` (float64), ``wall_time`` (float64, seconds since the epoch).
        """
        return self._frame("scalars", rank, ["step", "rank", "key", "value", "wall_time"])

    def memory(self, rank: int | None = None):
        """Memory per step.

        Returns
        -------
        DataFrame with columns ``step``, ``rank``, ``wall_time``, ``device`` (``cpu`` or
        ``cuda:N``), ``allocated_bytes``, ``reserved_bytes``, ``peak_bytes`` (CUDA caching
        allocator; null on CPU) and ``rss_bytes`` (the process's resident set size).
        """
        df = self._frame("memory", rank, ["step", "rank", "wall_time", "device", "allocated_bytes",
                                          "reserved_bytes", "peak_bytes", "rss_bytes"])
        for c in ("allocated_bytes", "reserved_bytes", "peak_bytes", "rss_bytes"):
            df[c] = df[c].astype("Int64")
        return df

    def steps(self, rank: int | None = None):
        """Step timing.

        Returns
        -------
        DataFrame with columns ``step``, ``rank``, ``wall_time`` (start of the step),
        ``step_time_s`` (inside ``rec.step``), ``data_wait_s`` (from the end of the
        previous step to the start of this one: waiting on the DataLoader; null for a
        segment's first step), ``comm_s`` (time in collectives where measured) and
        ``ok`` (False when the step raised).
        """
        return self._frame("steps", rank, ["step", "rank", "wall_time", "step_time_s",
                                           "data_wait_s", "comm_s", "ok"])

    def grad_norms(self, rank: int | None = None):
        """Per-parameter gradient L2 norms, plus the total norm as layer ``__total__``.

        Returns
        -------
        DataFrame with columns ``step`` (int64), ``rank`` (int32), ``layer``
        (categorical; categories in model order, ``__total__`` last) and ``grad_norm``
        (float64).

        Ranks that recorded the norms of their shards of DTensor parameters (FSDP2; the
        rank metadata's ``grad_shards``) are given the whole layer's norm, the root of the
        sum of their shards' squares at each step (:func:`debugkit.io.shards.add_shards`), as DDP's replicas
        hold it; so ``rank`` asks for every sharded rank's rows.
        """
        import numpy as np
        import pandas as pd

        if rank is not None and any(self.rank_meta(rank, seg).get("grad_shards") is True
                                    for seg in self._meta_segments(rank)):
            df = self.grad_norms()
            return df[df["rank"].to_numpy() == rank].reset_index(drop=True)
        sharded: set[int] = set()
        categories: list[str] = []
        index: dict[str, int] = {}
        steps, ranks, codes, values = [], [], [], []
        for r in self.ranks if rank is None else [rank]:
            for seg, t in self._read_table("grads", r):
                meta = self.rank_meta(r, seg)
                if meta.get("grad_shards") is True:
                    sharded.add(r)
                layers = list(meta.get("layers") or []) + [fmt.TOTAL_LAYER]
                for name in layers:
                    if name not in index and name != fmt.TOTAL_LAYER:
                        index[name] = len(categories)
                        categories.append(name)
                if not t.num_rows:
                    continue
                lid = t.column("layer_id").to_numpy()
                if lid.max(initial=0) >= len(layers) or lid.min(initial=0) < 0:
                    raise RunDirError(MSG_TABLE_UNREADABLE.format(
                        path=self._rank_dir(r), table="grads",
                        detail=f"layer_id outside 0..{len(layers) - 1}"))
                mapping = np.array([index.get(n, -1) for n in layers], dtype=np.int32)
                mapping[-1] = -2  # total, resolved below
                steps.append(t.column("step").to_numpy())
                ranks.append(np.full(t.num_rows, r, dtype=np.int32))
                codes.append(mapping[lid])
                values.append(t.column("grad_norm").to_numpy().astype(np.float64))
        categories.append(fmt.TOTAL_LAYER)
        if not steps:
            return pd.DataFrame({"step": np.zeros(0, np.int64), "rank": np.zeros(0, np.int32),
                                 "layer": pd.Categorical([], categories=categories),
                                 "grad_norm": np.zeros(0, np.float64)})
        code = np.concatenate(codes)
        code[code == -2] = len(categories) - 1
        step_a, rank_a, value_a = np.concatenate(steps), np.concatenate(ranks), np.concatenate(values)
        if rank is None and sharded:
            step_a, rank_a, code, value_a = add_shards(step_a, rank_a, code, value_a, sorted(sharded))
        return pd.DataFrame({
            "step": step_a,
            "rank": rank_a,
            "layer": pd.Categorical.from_codes(code, categories=categories),
            "grad_norm": value_a,
        }, copy=False)  # fresh arrays: no need for pandas to copy 10M rows again

    def requests(self, rank: int | None = None):
        """The requests of an inference run (:func:`debugkit.serve`; format 1.2; a training
        run gives an empty frame).

        Returns
        -------
        DataFrame with columns ``request`` (int64, 0-based per writer process, in start
        order), ``rank`` (int32), ``wall_time`` (float64, start, seconds since the epoch),
        ``latency_ms`` (float64), ``outcome`` (``ok | error | nonfinite | fallback``),
        ``fallback`` (the fallback's name, or None), ``error_type`` (or None),
        ``signature`` (``input_ids:int64[1,128];...``), ``input_numel`` (int64),
        ``mem_before_bytes`` and ``mem_after_bytes`` (Int64; null when unreadable),
        ``mem_kind`` (``cuda_allocated | rss``), ``device`` and ``failure_id`` (the
        capture under ``failures/``, or None) and ``route`` (the handler the service
        named: ``rec.request(inputs, route="/v1/generate")``, or None), ordered by
        ``wall_time``. See docs/run-format.md.
        """
        df = self._frame("requests", rank, ["request", "rank", "wall_time", "latency_ms", "outcome",
                                            "fallback", "error_type", "signature", "input_numel",
                                            "mem_before_bytes", "mem_after_bytes", "mem_kind",
                                            "device", "failure_id", "route"])
        for c in ("mem_before_bytes", "mem_after_bytes"):
            df[c] = df[c].astype("Int64")
        return df.sort_values("wall_time", kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------- failures, events
    def layer_stats(self, rank: int | None = None):
        """Layer statistics of the sampled steps (``Recorder(layer_stats_every=N)``; format
        1.1; a run without them gives an empty frame).

        Returns
        -------
        DataFrame with columns ``step`` (int64), ``rank`` (int32), ``order`` (int32: the
        module's place in the forward pass, then the parameters in model order),
        ``module`` (a module or parameter name), ``module_type`` (the module's class, or
        ``param``), ``stat`` (``mean``, ``std``, ``max_abs``, ``frac_zero``,
        ``frac_nonfinite``, ``frac_saturated``, ``frac_dead_units``, ``w_q01`` ...
        ``w_q99``, ``g_q01`` ... ``g_q99``, ``ndim``, ``update_ratio``, ``trigger_grad_norm``) and
        ``value`` (float64). See docs/run-format.md.
        """
        return self._frame("layers", rank, ["step", "rank", "order", "module", "module_type",
                                            "stat", "value"])

    def failures(self) -> list[dict]:
        """Failure captures, ordered by step then rank.

        Each record has at least ``id, kind, step, rank, error_type, message, traceback``
        plus ``dataset_indices``, ``device``, ``files``, ``code`` and ``path`` (its folder), and ``attempt`` (1-based, see
        :meth:`attempts`) when the run directory was opened by more than one writer.
        """
        d = self.path / fmt.FAILURES_DIR
        out = []
        if not d.is_dir():
            return out
        opened = [t for t in [self.manifest.get("created_at"), *(self.manifest.get("resumed_at") or [])]
                  if isinstance(t, (int, float))]
        for p in d.iterdir():
            if p.name.startswith("."):
                continue
            try:  # a capture folder that links out of the run is not read
                p = in_run(self.path, fmt.FAILURES_DIR, p.name, what="failure capture")
            except OutsideRunError as exc:
                self.warnings.append(str(exc))
                continue
            if not p.is_dir():
                continue
            f = p / fmt.FAILURE_JSON
            try:
                rec = read_run_json(f, fmt.FAILURE_JSON)
            except (OSError, ValueError) as exc:  # a RunFileError (wrong field type) too
                self.warnings.append(f"{f}: unreadable failure record skipped ({exc})")
                continue
            if rec.get("id", p.name) != p.name:
                # the id names the folder everywhere (links, replays, a repro zip's members):
                # it is the folder's name, whatever failure.json claims
                self.warnings.append(f"{f}: id {str(rec.get('id'))[:80]!r} is not its folder's "
                                     f"name; read as {p.name!r}")
            rec["id"] = p.name
            for k in ("kind", "step", "rank", "error_type", "message", "traceback"):
                rec.setdefault(k, None)
            rec["path"] = str(p)
            if len(opened) > 1 and isinstance(rec.get("time"), (int, float)):
                # which writer session captured it: runs re-opened keep their attempts apart
                rec["attempt"] = max(1, sum(1 for t in opened if t <= rec["time"]))
            out.append(rec)
        out.sort(key=lambda r: (r.get("step") if isinstance(r.get("step"), int) else 0,
                                r.get("rank") if isinstance(r.get("rank"), int) else 0, r["id"]))
        return out

    def failure(self, failure_id: str) -> dict:
        """One failure record by id (:class:`RunDirError` when there is none)."""
        for rec in self.failures():
            if rec["id"] == failure_id:
                return rec
        raise RunDirError(f"{self.path}: no failure capture with id {failure_id!r}")

    def events(self, rank: int | None = None) -> list[dict]:
        """Events (start, close, failure, nonfinite, ...) of every rank, by time.

        Each has ``time``, ``kind`` and ``rank``; a half-written last line is skipped.
        """
        out = []
        for r in self.ranks if rank is None else [rank]:
            d = self._rank_dir(r)
            for p in sorted(d.glob(f"{fmt.EVENTS_PREFIX}-*{fmt.EVENTS_SUFFIX}")):
                try:  # the 64 MiB cap of every JSON file: an event log is kilobytes
                    text = read_bytes_capped(p, MAX_JSON_BYTES, "an event log").decode("utf-8", "replace")
                except ValueError as exc:  # FileLimitError: too big, or not a regular file
                    self.warnings.append(f"{exc}; its events are left out")
                    continue
                except OSError:
                    continue
                for line in text.splitlines(keepends=True):
                    if not line.endswith("\n"):
                        self.warnings.append(f"{p}: skipped a half-written last event")
                        break
                    try:
                        ev = check_schema(loads_capped(line, p), "event", p)
                    except ValueError as exc:  # bad JSON, too deep, or a field of the wrong type
                        self.warnings.append(f"{p}: skipped an unreadable event line ({str(exc)[:200]})")
                        continue
                    ev["rank"] = r
                    out.append(ev)
        out.sort(key=lambda e: e.get("time") or 0)
        return out

    def profiles(self) -> list[dict]:
        """Profiles, traces and stack dumps stored in the run (``profiles/``), oldest first.

        Each entry has ``id, kind`` (``sampled | trace | stacks``), ``format``
        (``speedscope | raw | chrome-trace | pyspy-dump``), ``file``, ``path``,
        ``created_at``, ``origin``, ``summary``; see :mod:`debugkit.io.run_profiles`.
        """
        from .run_profiles import list_profiles

        return list_profiles(self)

    def env(self) -> dict:
        """The recorded environment: the manifest's ``env`` plus ``pip_check`` when done."""
        env = dict(self.manifest.get("env") or {})
        try:
            env.update(read_run_json(self.path / fmt.ENV_FILE, fmt.ENV_FILE))
        except (OSError, ValueError):
            pass
        return env

    def datasets(self) -> list[dict] | None:
        """The datasets the run trained on (``data.json``, written by ``rec.track``).

        Each entry has ``class, length, sampled_indices, item_sha256, fingerprint,
        error, first_step`` (see :mod:`debugkit.recorder.datafp`). None when the run has
        no ``data.json`` (written before debugkit recorded it, or no loader was tracked):
        unknown, not empty.
        """
        try:
            rec = read_run_json(self.path / fmt.DATA_FILE, fmt.DATA_FILE)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # too big, bad JSON, a field of the wrong type
            self.warnings.append(f"{self.path / fmt.DATA_FILE}: unreadable ({exc}); data unknown")
            return None
        ds = rec.get("datasets")
        return list(ds) if isinstance(ds, list) else None

    def batch_spec(self) -> dict | None:
        """The batch spec learned from the run's healthy batches, as a dict
        (:meth:`debugkit.BatchSpec.to_dict` plus ``inferred_from`` and ``source``).

        Read from the lowest rank's latest ``ranks/<r>/batch_spec-<seg>.json`` (written at
        close);
        for a run without one (killed, or older), from its first failure capture's
        ``batch_spec.json``. None when neither exists.
        """
        candidates = []
        for r in self.ranks:  # the lowest rank's latest writer session first
            segs = sorted(self._rank_dir(r).glob(fmt.RANK_BATCH_SPEC.replace("{segment:03d}", "*")),
                          reverse=True)
            candidates += [(p, f"rank {r}") for p in segs]
        candidates += [(as_path(f["path"]) / fmt.BATCH_SPEC_FILE, f"failure {f['id']}")
                       for f in self.failures()]
        for path, source in candidates:
            try:
                spec = read_run_json(path, fmt.BATCH_SPEC_FILE)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:  # too big, bad JSON, a field of the wrong type
                self.warnings.append(f"{path}: unreadable batch spec skipped ({exc})")
                continue
            if isinstance(spec.get("tensors"), dict):
                spec["source"] = source
                return spec
        return None

    # ------------------------------------------------------------------- memory
    def memory_capacity(self):
        """Memory each rank may use, for capacity lines and run-out projections.

        Returns
        -------
        DataFrame with columns ``rank``, ``device`` (as the rank's meta names it),
        ``device_capacity_bytes`` (the CUDA device's total memory: the rank's meta, else
        the manifest's ``env.gpus``; null on CPU) and ``host_capacity_bytes`` (the smaller
        of the host's physical memory and its cgroup limit; null when not recorded).
        """
        import pandas as pd

        gpus = {g.get("index"): g.get("total_memory_bytes")
                for g in (self.manifest.get("env") or {}).get("gpus") or [] if isinstance(g, dict)}
        rows = []
        for r in self.ranks:
            meta = self.rank_meta(r)
            device = str(meta.get("device") or "")
            dev_cap = meta.get("device_memory_bytes")
            if dev_cap is None and device.startswith("cuda"):
                idx = int(device.split(":")[1]) if ":" in device and device.split(":")[1].isdigit() else 0
                dev_cap = gpus.get(idx)
            host = [v for v in (meta.get("host_memory_bytes"), meta.get("host_memory_limit_bytes"))
                    if isinstance(v, (int, float)) and v > 0]
            rows.append({"rank": r, "device": device,
                         "device_capacity_bytes": dev_cap if isinstance(dev_cap, (int, float)) else None,
                         "host_capacity_bytes": min(host) if host else None})
        df = pd.DataFrame(rows, columns=["rank", "device", "device_capacity_bytes", "host_capacity_bytes"])
        for c in ("device_capacity_bytes", "host_capacity_bytes"):
            df[c] = df[c].astype("Int64")
        return df

    def memory_snapshots(self) -> list[dict]:
        """PyTorch memory snapshots in ``memory_snapshots/`` (see
        :func:`debugkit.io.run_memsnaps.list_snapshots`)."""
        from .run_memsnaps import list_snapshots

        return list_snapshots(self.path)

    # ------------------------------------------------------------------- summaries
    def row_counts(self) -> dict[str, int]:
        """Number of complete rows per table, over all ranks."""
        counts = {}
        for table in fmt.TABLES:
            n = 0
            for r in self.ranks:
                n += sum(t.num_rows for _, t in self._read_table(table, r))
            counts[table] = n
        return counts

    def files_signature(self) -> tuple:
        """``(relative path, size, mtime_ns)`` of every file: a cache key that changes
        whenever the run does (a live run's appends included)."""
        return files_signature(self.path)

    def time_span(self) -> tuple[float | None, float | None]:
        """(first, last) wall time seen in the run's step rows or heartbeats."""
        hbs = [hb.get("time") for hb in self.heartbeats().values() if hb.get("time")]
        start = self.manifest.get("created_at")
        end = max(hbs) if hbs else None
        return start, end


def open_run(path: str | os.PathLike) -> Run:
    """Open a run directory, a ``.zip`` of one, or a TensorBoard log directory (converted
    once into the cache, see :mod:`debugkit.io.tensorboard`), for reading.

    ``path`` may be an fsspec URL (``s3://bucket/runs/r1``, ``gs://...``,
    ``memory://...``): the run is read in place (see :mod:`debugkit.io.fs`).

    Raises
    ------
    RunDirError
        The path does not exist, is not a run, or its manifest is malformed.
    InvalidInputError
        ``$DEBUGKIT_ALLOWED_ROOTS`` is set and the run, or a link inside it, resolves
        outside it.
    SchemaVersionError
        The run was written by a newer major version of the format.
    """
    p, source = resolve_run_path(path)  # a zip, a TensorBoard folder or a URL: a local folder
    return Run(p, fmt.read_manifest(p), source=source)

