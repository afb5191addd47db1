"""Every threshold a bias audit uses, in one place (stored with each audit)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import InvalidInputError

MSG_BAD_SETTING = "audit setting {name}={value!r}: {expected}"
MSG_UNKNOWN_SETTING = "audit settings: unknown field(s) {names}; known: {known}"

# The metrics whose ratio to the reference group is judged against the band. Base rate
# (a property of the data) and accuracy are reported but not judged.
JUDGED_METRICS = ("selection_rate", "tpr", "fpr", "fnr", "precision")


@dataclass(frozen=True)
class AuditSettings:
    """Thresholds of a bias audit. Every field is stored in the audit's provenance.

    Attributes
    ----------
    band : (float, float)
        A group's metric divided by the reference group's is acceptable inside
        ``[low, high]``. Default ``(0.8, 1.25)``: Aequitas' default, the "four-fifths
        rule" (a US employment-selection convention, not a universal legal standard).
    max_difference : float
        Largest acceptable demographic parity, equalized odds and equal opportunity
        difference (absolute, in rate units). Default 0.1.
    judged_metrics : tuple of str
        Metrics whose disparity ratio is judged (subset of ``selection_rate, tpr, fpr,
        fnr, precision, accuracy``).
    reference : dict
        ``{attribute: group}``: the reference group of an attribute (default: its
        largest group).
    min_group_size : int
        Groups with fewer rows make the attribute "needs review" (their metrics are
        too noisy to judge). Default 30.
    n_boot : int
        Bootstrap resamples for the confidence intervals. Default 1000.
    ci_level : float
        Confidence level of the intervals (percentile bootstrap). Default 0.95.
    seed : int
        Seed of the bootstrap and of the background sample.
    top_k : int
        A sensitive feature or proxy ranking in the top ``top_k`` by mean |SHAP| is
        flagged. Default 5.
    share : float
        ...or one whose mean |SHAP| is at least this share of the total. Default 0.10.
    proxy_threshold : float
        A feature whose association (bias-corrected Cramér's V, or the correlation
        ratio for a numeric feature) with a sensitive attribute is at least this is a
        likely proxy. Default 0.3 (a "moderate" association).
    decision_threshold : float
        Score at or above which a probability output counts as a positive decision
        (torch modules and predict functions returning probabilities). Default 0.5.
    additivity_tolerance : float
        SHAP values whose sum misses the model output by more than this (times
        ``max(1, largest |output|)``) make the audit "needs review". Default 1e-4.
    """

    band: tuple[float, float] = (0.8, 1.25)
    max_difference: float = 0.1
    judged_metrics: tuple[str, ...] = JUDGED_METRICS
    reference: dict[str, str] = field(default_factory=dict)
    min_group_size: int = 30
    n_boot: int = 1000
    ci_level: float = 0.95
    seed: int = 0
    top_k: int = 5
    share: float = 0.10
    proxy_threshold: float = 0.3
    decision_threshold: float = 0.5
    additivity_tolerance: float = 1e-4

    def __post_init__(self):
        band = tuple(float(v) for v in self.band) if _seq(self.band) else None
        if band is None or len(band) != 2 or not (0 < band[0] <= 1 <= band[1]) or \
                not all(math.isfinite(v) for v in band):
            raise InvalidInputError(MSG_BAD_SETTING.format(
                name="band", value=self.band, expected="expected (low, high) with 0 < low <= 1 <= high"))
        object.__setattr__(self, "band", band)
        _check(self.max_difference, "max_difference", 0.0, 1.0)
        known = ("selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy")
        jm = tuple(self.judged_metrics) if _seq(self.judged_metrics) else None
        if not jm or any(m not in known for m in jm):
            raise InvalidInputError(MSG_BAD_SETTING.format(
                name="judged_metrics", value=self.judged_metrics,
                expected=f"expected a non-empty list of {', '.join(known)}"))
        object.__setattr__(self, "judged_metrics", jm)
        if not isinstance(self.reference, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.reference.items()):
            raise InvalidInputError(MSG_BAD_SETTING.format(
                name="reference", value=self.reference, expected="expected {attribute: group} strings"))
        object.__setattr__(self, "reference", dict(self.reference))
        _check_int(self.min_group_size, "min_group_size", 1, 10**9)
        _check_int(self.n_boot, "n_boot", 0, 100_000)
        _check(self.ci_level, "ci_level", 0.5, 0.999)
        _check_int(self.seed, "seed", 0, 2**32 - 1)
        _check_int(self.top_k, "top_k", 1, 10**6)
        _check(self.share, "share", 0.0, 1.0)
        _check(self.proxy_threshold, "proxy_threshold", 0.0, 1.0)
        _check(self.decision_threshold, "decision_threshold", 0.0, 1.0)
        _check(self.additivity_tolerance, "additivity_tolerance", 0.0, 1e6)

    @classmethod
    def from_any(cls, value: AuditSettings | dict | None) -> AuditSettings:
        """Settings from an instance, a dict of fields, or None (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            names = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - names)
            if unknown:
                raise InvalidInputError(MSG_UNKNOWN_SETTING.format(
                    names=", ".join(unknown), known=", ".join(sorted(names))))
            return cls(**value)
        raise InvalidInputError(MSG_BAD_SETTING.format(
            name="settings", value=type(value).__name__, expected="expected AuditSettings, a dict or None"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["band"] = list(self.band)
        d["judged_metrics"] = list(self.judged_metrics)
        return d


def _seq(v) -> bool:
    return isinstance(v, (list, tuple))


def _check(value, name, lo, hi):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and lo <= value <= hi
    if not ok:
        raise InvalidInputError(MSG_BAD_SETTING.format(
            name=name, value=value, expected=f"expected a number in [{lo}, {hi}]"))


def _check_int(value, name, lo, hi):
    ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    if not ok:
        raise InvalidInputError(MSG_BAD_SETTING.format(
            name=name, value=value, expected=f"expected an integer in [{lo}, {hi}]"))
