"""Regenerate every run in sample_runs/ from the real training scripts in examples/.

    python -m examples.make_samples            # all of them
    python -m examples.make_samples digits-mlp # just one

Each sample is one command; a sample whose script is meant to fail (it records a real
crash) lists the exit status it expects.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_runs"

# name -> (argv after `python -m`, expected exit status), or a list of such steps for a
# sample built by several commands. In an argv, "{out}" is the sample's folder, "{tmp}" a
# scratch folder and "{python}" this interpreter; an argv without "{out}" gets
# "--out <folder>" appended.
SAMPLES: dict[str, tuple[list[str], int] | list[tuple[list[str], int]]] = {
    "digits-mlp": (["examples.digits"], 0),
    "digits-bad-label": (["examples.digits", "--corrupt-label", "12"], 1),
    # torchrun jobs on CPU (gloo): a 4-rank run whose rank 2 loads data slowly, and a
    # 2-rank run whose rank 0 hangs in an all-reduce that rank 1 skipped.
    "ddp-straggler": (["torch.distributed.run", "--standalone", "--nproc_per_node", "4",
                       "-m", "examples.ddp_digits", "--slow-rank", "2", "--profile"], 0),
    "ddp-hang": (["torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                  "-m", "examples.ddp_digits", "--uneven"], 1),
    # The corrupted-label run again, with a batch guard that skips the bad batch: it finishes.
    "digits-guarded": (["examples.digits", "--corrupt-label", "12", "--guard", "skip"], 0),
    # A job that checkpoints every 30 steps, is SIGKILLed after step 100, has its newest
    # checkpoint (step 90) truncated, and resumes with resume_latest from step 60.
    "digits-resumed": [
        (["examples.digits_resumable", "--out", "{out}", "--kill-at-step", "100"], -9),
        (["examples.digits_resumable", "--out", "{out}", "--truncate-newest"], 0),
        (["examples.digits_resumable", "--out", "{out}"], 0),
    ],
    "wine-missing-feature": (["examples.wine_deliveries"], 1),
    "cancer-nan-input": (["examples.cancer_ratio"], 1),
    "digits-metric-zero-distance": (["examples.digits_metric"], 1),
    "credit-unseen-category": (["examples.credit_categories"], 1),
    "digits-exploding": (["examples.exploding"], 1),
    "digits-vanishing": (["examples.vanishing"], 0),
    "memory-leak": (["examples.memory_leak"], 0),
    # An inference run (debugkit.serve): a small HTTP service whose /v1/generate handler
    # keeps every output, driven by 1,500 requests, two of them bad (a token id past the
    # vocabulary, a temperature of 0).
    "serve-leak": (["examples.serve_leak"], 0),
    # Layer statistics (docs/layers.md): dead ReLUs from a -1 bias init, sigmoids saturated
    # by N(0, 1) weights, activations growing ~5.7x a layer until the loss is NaN, and Adam
    # at lr=1e-7 whose updates are ~1e-6 of the weights.
    "digits-dead-relu": (["examples.layer_health", "--case", "dead-relu"], 0),
    "digits-saturated-sigmoid": (["examples.layer_health", "--case", "saturated-sigmoid"], 0),
    "digits-unscaled-init": (["examples.layer_health", "--case", "unscaled-init"], 1),
    "digits-adam-lr-typo": (["examples.layer_health", "--case", "adam-lr-typo"], 0),
    # Pairs for `debugkit compare`: a base, the same with lr 0.5, and with a quarter of the
    # labels exported as ignore_index (-100).
    "digits-compare-base": (["examples.digits_compare"], 0),
    "digits-compare-lr": (["examples.digits_compare", "--lr", "0.5"], 0),
    "digits-compare-unlabelled": (["examples.digits_compare", "--unlabelled", "0.25"], 0),
    "credit-audit": (["examples.credit"], 0),
    # The integrations (docs/integrations.md): a healthy Lightning run, a tiny BERT under
    # the HF Trainer crashing on a corrupted label, the plain Recorder under Accelerate
    # (bf16, 2 micro-batches per step) stopping on the 0/0 NaN feature, and an unedited
    # loop attached with debugkit.watch crashing on a corrupted label.
    "lightning-digits": (["examples.lightning_train"], 0),
    "hf-bert-bad-label": (["examples.hf_bert_digits", "--corrupt-label", "12"], 1),
    "accelerate-nan": (["examples.accelerate_loop", "--data", "cancer"], 1),
    "watch-bad-label": (["examples.watch_loop", "--corrupt-label", "12"], 1),
    # py-spy profiles of the digits training (2 DataLoader workers, then none, for the
    # diff) and a torch.profiler trace of a few steps of the same model.
    "digits-profiled": [
        (["debugkit", "profile", "{out}", "--name", "train", "--label",
          "digits training, 2 DataLoader workers", "--", "{python}", "-m", "examples.digits",
          "--out", "{out}"], 0),
        (["debugkit", "profile", "{out}", "--name", "train-no-workers", "--label",
          "the same training with num_workers=0", "--", "{python}", "-m", "examples.digits",
          "--num-workers", "0", "--out", "{tmp}/no-workers"], 0),
        (["examples.digits_trace", "--out", "{out}"], 0),
    ],
}


def make(name: str) -> None:
    import tempfile

    steps = SAMPLES[name]
    steps = steps if isinstance(steps, list) else [steps]
    out = OUT / name
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory(prefix=f"sample-{name}-") as tmp:
        for argv, expected in steps:
            subst = {"{out}": str(out), "{tmp}": tmp, "{python}": sys.executable}
            args = [subst.get(a, a) if a in subst else a.replace("{tmp}", tmp) for a in argv]
            cmd = [sys.executable, "-m", *args] + ([] if "{out}" in argv else ["--out", str(out)])
            print("+", " ".join(cmd[1:]), flush=True)
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != expected:
                sys.stderr.write(proc.stdout + proc.stderr)
                raise SystemExit(f"{name}: exit status {proc.returncode}, expected {expected}")
    # The dashboard lists a sample by its folder: its display name is the same (the
    # training scripts name their runs otherwise, and they are model-factory files whose
    # recorded hash replay checks, so they are left as they are).
    from debugkit import format as fmt

    fmt.update_manifest(out, lambda m: {**m, "name": name})


def main(argv=None) -> None:
    names = (argv if argv is not None else sys.argv[1:]) or list(SAMPLES)
    unknown = [n for n in names if n not in SAMPLES]
    if unknown:
        raise SystemExit(f"unknown sample(s): {', '.join(unknown)}; known: {', '.join(SAMPLES)}")
    for n in names:
        make(n)


if __name__ == "__main__":
    main()
