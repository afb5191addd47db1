"""Every advice template renders without a culprit's fields: no ``None``, no empty name."""

from __future__ import annotations

import pytest

from debugkit.replay.advice import advice_for
from debugkit.replay.report import CHECKS

EMPTY_CULPRITS = [{}, {k: None for k in ("module", "op", "input", "sample_index", "dataset_index",
                                           "detail")},
                  {"module": "", "op": "", "input": "", "detail": ""}]


@pytest.mark.parametrize("culprit", EMPTY_CULPRITS, ids=["missing", "none", "empty"])
@pytest.mark.parametrize("failing", CHECKS + ("collate", "fetch"))
def test_advice_never_renders_none_or_an_empty_name(failing, culprit):
    checks = [{"name": n, "ok": n != failing, "detail": "non-finite weights" if n == failing else ""}
              for n in CHECKS + ("collate", "fetch")]
    for crash in (None, "SIGSEGV", "Timeout"):
        report = {"checks": checks, "culprit": dict(culprit), "reproduced": True,
                  "replay": {"type": crash} if crash else None}
        out = advice_for(report)
        assert out, (failing, culprit)
        for sentence in out:
            assert "None" not in sentence and "``" not in sentence and " ()" not in sentence, sentence
            assert ":  " not in sentence and not sentence.endswith(" .") and ": ." not in sentence, sentence


def test_loss_computation_advice_names_the_op_and_the_stable_forms():
    checks = [{"name": n, "ok": n != "finite_forward", "detail": ""} for n in CHECKS]
    out = advice_for({"checks": checks, "reproduced": True,
                      "culprit": {"module": "(loss computation)", "op": "torch.exp", "sample_index": 2}})
    assert out[0].startswith("The loss computation made the loss non-finite at torch.exp (sample 2)")
    assert "exp overflowed" in out[0] and "F.log_softmax" in out[0] and "torch.logsumexp" in out[0]
