"""``step_failure`` findings: one per failure capture."""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.lost_ranks import describe_collective_error, parse_collective_error

#: At most this many captures have their batch read (each reads its safetensors file).
MAX_BATCH_CHECKS = 20


def collect(run, config: dict) -> list[Finding]:
    from ..replay.batchcheck import check_captured_batch

    out = []
    for n, f in enumerate(run.failures()):
        kind = f.get("kind")
        if kind == "request":  # an inference run's failing request: debugkit.diagnose.serving
            continue
        etype = f.get("error_type") or ("non-finite values" if kind == "nonfinite" else kind)
        msg = (f.get("message") or "").strip().splitlines()
        first = msg[0] if msg else ""
        coll = parse_collective_error(f.get("message"), f.get("traceback"))
        if coll is not None:
            first += f" [{describe_collective_error(coll)}]"
        shown = (check_captured_batch(f, run.manifest.get("num_classes"))
                 if n < MAX_BATCH_CHECKS and kind != "data_loading" else None)
        seen = f" The captured batch shows it: {shown['detail']}." if shown else ""
        nf = f.get("nonfinite") or {}
        outs = nf.get("model_outputs") or {}
        origin = None
        if kind == "nonfinite" and nf.get("loss_finite") is False and outs.get("finite") is True:
            origin = "loss_computation"
            seen += (" Every output of the model was finite"
                     + (f" (max |output| {outs['absmax']:.3g})" if outs.get("absmax") is not None else "")
                     + ": the loss computation made the loss non-finite.")
        dl = f.get("data_loading") if kind == "data_loading" else None
        if dl is not None:
            from ..recorder.dataload import odd_phrase

            odd = odd_phrase(dl)
            seen = (f" It was raised while the DataLoader {'read a sample' if dl.get('phase') == 'fetch' else 'collated the batch'}"
                    + (f" ({dl.get('num_workers')} worker processes)" if dl.get("num_workers") else "")
                    + (f": {odd}" if odd else "") + (f"; {dl['advice']}" if dl.get("advice") else "") + ".")
        out.append(Finding(
            kind="step_failure", step=f.get("step"), rank=f.get("rank"), layer=None,
            severity="error" if kind != "nonfinite" else "warning",
            message=f"Step {f.get('step')} on rank {f.get('rank')} failed with {etype}: {first} "
                    f"(capture {f['id']}; replay it with `debugkit replay`).{seen}",
            evidence={"failure": f["id"], "capture_kind": kind, "error_type": f.get("error_type"),
                      "dataset_indices": f.get("dataset_indices"), "collective": coll,
                      "batch_shows": shown, "origin": origin,
                      "data_loading": None if dl is None else {
                          "phase": dl.get("phase"), "odd_positions": dl.get("odd") or [],
                          "odd_dataset_indices": [(dl.get("samples") or [])[p].get("dataset_index")
                                                  for p in dl.get("odd") or []
                                                  if p < len(dl.get("samples") or [])],
                          "advice": dl.get("advice")}},
        ))
    return out
