"""The catalogue of finding kinds: every ``Finding.kind`` debugkit can emit, with its area,
default severity, a one-line title, the dashboard page that shows it and the doc section
that explains it.

``debugkit diagnose --kinds [--json]`` prints it. ``tests/analysis/test_kinds.py`` checks
that every kind any detector, source or audit constructs is listed here, that each doc
section exists and names its kind, and that ``diagnose`` on every bundled sample emits no
kind outside it. A new kind is one line here and a paragraph in its doc section.

``severity`` is the default: a few kinds are raised or lowered by what was seen
(``step_failure`` of a non-finite capture is a warning; a ``hang`` whose step finished
late is a warning; a ``bias_audit`` that only needs review is ``info``); ``severities``
lists every level a kind can take. Imports nothing but the standard library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class FindingKind:
    """One kind of finding.

    Attributes
    ----------
    kind : str
        The ``Finding.kind`` string (part of ``debugkit diagnose --json``).
    area : str
        Which analysis finds it (``gradients``, ``failures``, ``memory`` ...).
    severity : str
        Its default severity (``error | warning | info``).
    severities : tuple of str
        Every severity it can have.
    title : str
        What it means, in one line.
    page : str
        The dashboard page that shows it.
    doc : str
        The doc section that explains it (``docs/<page>.md#<anchor>``).
    """

    kind: str
    area: str
    severity: str
    severities: tuple[str, ...]
    title: str
    page: str
    doc: str

    def to_dict(self) -> dict:
        """``{"kind", "area", "severity", "severities", "title", "page", "doc"}``."""
        d = asdict(self)
        d["severities"] = list(self.severities)
        return d


def _k(kind, area, severity, title, page, doc, also=()):
    return FindingKind(kind, area, severity, (severity, *also), title, page, doc)


_G = "docs/gradients.md#findings"
_D = "docs/distributed.md#"
_M = "docs/memory.md#"
_L = "docs/layers.md#"
_S = "docs/serving.md#"

#: Every kind, grouped by area, in the order ``debugkit diagnose --kinds`` prints them.
KINDS: tuple[FindingKind, ...] = (
    _k("step_failure", "failures", "error", "A step raised (or a non-finite capture was written); "
       "the capture holds its batch, state and RNG to replay", "Overview", _G, also=("warning",)),
    _k("nonfinite_loss", "gradients", "error", "The first step whose loss is NaN or Inf", "Gradients", _G),
    _k("nonfinite_grad", "gradients", "error", "The first step whose gradient norms hold NaN/Inf, "
       "and the first layer affected", "Gradients", _G),
    _k("exploding_grad", "gradients", "warning", "A gradient norm jumped far above its recent median "
       "or grew geometrically", "Gradients", _G),
    _k("vanishing_grad", "gradients", "warning", "Layers whose gradient norm stays negligible",
       "Gradients", _G),
    _k("dead_layer", "gradients", "warning", "Parameters whose gradient is exactly zero for many steps",
       "Gradients", _G),
    _k("loss_spike", "gradients", "warning", "A loss far above its recent median", "Gradients", _G),
    _k("dead_units", "layers", "warning", "A ReLU-family module whose units output zero for the "
       "whole batch, step after sampled step", "Gradients", _L + "dead_units"),
    _k("saturation", "layers", "warning", "A tanh/sigmoid-type module whose outputs sit at their "
       "bounds, starving the layers before it of gradient", "Gradients", _L + "saturation"),
    _k("activation_growth", "layers", "warning", "Module outputs whose max-abs grows geometrically "
       "along the forward pass or over steps, and the first module", "Gradients",
       _L + "activation_growth"),
    _k("update_ratio", "layers", "warning", "A trained parameter whose update-to-weight ratio is "
       "far outside its usual band, with the learning rate", "Gradients", _L + "update_ratio"),
    _k("straggler", "distributed", "warning", "A rank slower than the others (steps or profiler "
       "traces)", "Distributed", _D + "straggler-from-the-steps-table"),
    _k("hang", "distributed", "error", "A rank stopped in a step (watchdog dumps or py-spy stacks) "
       "and where it waits", "Distributed", _D + "hang", also=("warning",)),
    _k("rank_crashed", "distributed", "error", "The rank that died first; the other ranks' errors "
       "follow from it", "Distributed", _D + "rank_crashed-and-rank_lost"),
    _k("rank_lost", "distributed", "error", "A rank that stopped writing without an error "
       "(killed, lost node)", "Distributed", _D + "rank_crashed-and-rank_lost"),
    _k("rank_divergence", "distributed", "warning", "A rank's gradient norms part from the other ranks'",
       "Distributed", _D + "rank_divergence", also=("error",)),
    _k("collective_mismatch", "distributed", "error", "The rank that skipped or added a collective "
       "(per-step collective counts differ); later hangs and timeouts follow from it",
       "Distributed", _D + "collective_mismatch"),
    _k("trace_coverage", "distributed", "info", "Which ranks have torch.profiler traces",
       "Distributed", _D + "trace_coverage-info"),
    _k("memory_leak", "memory", "warning", "Memory grows steadily across steps (a fitted leak)",
       "Memory", _M + "memory_leak", also=("error",)),
    _k("memory_pressure", "memory", "warning", "Memory close to the device's or host's limit",
       "Memory", _M + "memory_pressure", also=("error",)),
    _k("fragmentation", "memory", "warning", "The CUDA allocator reserves far more than is allocated",
       "Memory", _M + "fragmentation"),
    _k("request_memory_leak", "serving", "warning", "An inference service's memory grows with the "
       "request count: rate per 1,000 requests, requests left to the memory threshold and the "
       "route that keeps it", "Memory", _S + "request_memory_leak", also=("error",)),
    _k("memory_grows_with_input", "serving", "info", "An inference service's memory rose with the "
       "largest input seen, not with the request count (not a leak)", "Memory",
       _S + "memory_grows_with_input"),
    _k("latency_regression", "serving", "warning", "A route's request latency changed level at a "
       "request (a change point, judged per route), with its correlation with memory and input size", "Overview",
       _S + "latency_regression"),
    _k("request_error", "serving", "error", "Requests of one input signature that raised, with the "
       "rate, the error and the capture to replay", "Replay", _S + "request_error-and-request_nonfinite"),
    _k("request_nonfinite", "serving", "error", "Requests of one input signature whose output held "
       "NaN/Inf, with the rate and the capture to replay", "Replay",
       _S + "request_error-and-request_nonfinite"),
    _k("fallback_rate", "serving", "warning", "How often the service answered with a fallback, what "
       "caused it and for which inputs", "Overview", _S + "fallback_rate", also=("info",)),
    _k("dataloader_bound", "profiles", "warning", "The training loop waits on data loading for a "
       "large share of its time", "Profiler", "docs/profiler.md#reading"),
    _k("unreadable_profile", "profiles", "info", "A profile file of the run could not be read",
       "Profiler", "docs/profiler.md#reading"),
    _k("nonfinite_weights", "checkpoints", "error", "The first checkpoint holding NaN/Inf weights",
       "Checkpoints", "docs/checkpoints.md#the-checkpoints-page"),
    _k("frozen_layer", "checkpoints", "warning", "Parameters that receive gradients but never change "
       "across checkpoints", "Checkpoints", "docs/checkpoints.md#the-checkpoints-page"),
    _k("bias_audit", "audit", "warning", "A stored bias audit fails (or needs review)", "Bias audit",
       "docs/audit.md#command-line", also=("info",)),
    _k("audit_tampered", "audit", "error", "A stored audit no longer matches its content address",
       "Bias audit", "docs/audit.md#command-line"),
    _k("fairness", "audit", "warning", "One sensitive attribute's fairness metric outside its band "
       "(inside a bias audit)", "Bias audit", "docs/audit.md#what-is-computed", also=("info",)),
    _k("sensitive_feature", "audit", "info", "A sensitive feature ranks high by mean |SHAP| (an "
       "audit's attribution flag)", "Bias audit", "docs/audit.md#what-is-computed"),
    _k("proxy", "audit", "info", "A likely proxy of a sensitive attribute ranks high by mean |SHAP| "
       "(an audit's attribution flag)", "Bias audit", "docs/audit.md#what-is-computed"),
    _k("runs_diverge", "compare", "warning", "The step and layer where a run's curves leave the "
       "base run's noise band", "Compare", "docs/compare.md#the-sections-in-order"),
)

#: ``kind -> FindingKind``.
CATALOGUE: dict[str, FindingKind] = {k.kind: k for k in KINDS}
