"""Settings of the DISCOVER solver: one frozen, pydantic-free dataclass.

Units: every distance and objective value is a **squared** Wasserstein-2 quantity (``SW^2`` on
the input side, ``W^2`` on the output side) in the schema's encoded space (numerical features as
z-scores, each categorical as one (cos, sin) phase pair), or in the space of ``Discover(embed=...)``.
UCLs and thresholds are squared under ``certificate="dkw"`` (default) and unsquared under
``certificate="bootstrap"``.
Scores ``b(x)`` are probabilities of the favourable class, in [0, 1].
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recourselab.errors import ConfigError, did_you_mean

ACTIONABILITY = ("increasing", "decreasing", "fixed")
#: Stopping rules of the outer loop (see ``DiscoverSettings.stop``).
STOP_RULES = ("stalled", "certified", "ot_y")
#: Ranges that scale numerical steps (see ``DiscoverSettings.step_range``).
STEP_RANGES = ("training", "factuals")
#: Confidence rules of the certificate (see ``DiscoverSettings.certificate``).
CERTIFICATE_RULES = ("dkw", "bootstrap")
#: How the editable rows of an iteration are chosen (see ``DiscoverSettings.row_choice``).
ROW_CHOICES = ("top_k", "stall")
#: Which selected candidate replaces the iterate (see ``DiscoverSettings.accept``).
ACCEPT_RULES = ("improve", "best")


_TYPE_WORDS = {"int": "an integer", "float": "a finite number", "bool": "True or False", "str": "a string"}


def _type_ok(value: Any, base: str) -> bool:
    """Whether ``value`` is of the settings type ``base`` (no bool for numbers, ints are floats)."""
    if base == "bool":
        return isinstance(value, bool | np.bool_)
    if isinstance(value, bool | np.bool_):
        return False
    if base == "int":
        return isinstance(value, numbers.Integral)
    if base == "float":
        return isinstance(value, numbers.Real) and math.isfinite(value)
    return isinstance(value, str)


def _type_problems(settings: Any) -> list[str]:
    """``"name=value (rule)"`` for every field whose value does not have its annotated type."""
    wrong = []
    for f in dataclasses.fields(settings):
        text = str(f.type)  # e.g. "float | None" (the module uses postponed annotations)
        base, optional = text.removesuffix(" | None"), text.endswith(" | None")
        value = getattr(settings, f.name)
        if base in _TYPE_WORDS and not (optional and value is None) and not _type_ok(value, base):
            wrong.append(f"{f.name}={value!r} ({_TYPE_WORDS[base]}{' or None' if optional else ''})")
    return wrong


@dataclass(frozen=True)
class DiscoverSettings:
    """Every option of :class:`~recourselab.discover.Discover`, with its default.

    Search budget
    -------------
    n_projections : N, number of random unit directions of the sliced objective (drawn once
        per run from ``seed``, or per iteration with ``resample_directions``). Default 10.
    resample_directions : draw a fresh set of N directions at every outer iteration (seeded by
        ``seed`` and the iteration) instead of one set per run. With one fixed set the search
        can fit those N projections while the many-direction OT(x) grows; with fresh sets no
        set is optimised against for more than one iteration. A calibrated ``U_x`` is then
        recalibrated on each iteration's directions (logged per iteration). Default False (one
        set, as DCE and the released code).
    top_k : k, rows editable per outer iteration (the top-k rows by row score q_i). Default 3.
    h : features edited per selected row and candidate (a categorical counts as one feature).
        Default 1 (one feature per row and candidate: the cheapest moves in OT(x)).
    trials : M, candidates proposed per outer iteration (the current X is always added as a
        no-op candidate, so Q under the iteration's eta never increases). Default 200.
    max_iter : T, outer iterations. Default 100.

    The search-budget defaults (T 100, M 200, as the paper's released configuration; h 1 and
    ``step`` 0.2) are what ``bench/discover.py`` measures (its figures: docs/results.md); the
    paper's *reference* speed configuration is N 10, T 20, M 10, k 3, h 3 (step 0.1, the
    released code's ``continuous_step``).
    strategy : proposal strategy, a key of :data:`~recourselab.discover.strategies.STRATEGIES`
        (``"monte_carlo"`` or ``"genetic"``). Default ``"monte_carlo"``.
    recombine : also score the row-wise recombination of the evaluated candidates (each
        editable row takes its edit with the lowest row score q_i under the fixed plans, or
        stays put); it reuses known model scores (no extra query) and is kept only if its
        exact Q is lower. Default True (False: the plain propose-and-select of the paper).

    Objective and certification (squared units)
    -------------------------------------------
    delta : trimming constant of the objective and of the UCLs, in (0, 1/2) as the spec requires. Default 0.01
        (nearly untrimmed: the DKW bands reach the sample extremes, so the solver must move
        the tails too; the reported OT(x), OT(y) use ``metric_delta``).
    alpha : confidence level of the certificate; the output-side band has level alpha, each of
        the N input-side bands alpha / N (Bonferroni). Default 0.05.
    U_x : threshold on UCL_x (squared). ``None``: calibrated from the factual sample as
        ``(1 + U_x_margin) * UCL_x(X', X')``, i.e. the DKW band's noise floor of the unedited
        sample plus a relative budget (the floor scales with the data's spread and shrinks
        with n, so a fixed number cannot fit every dataset and sample size).
    U_y : threshold on UCL_y (squared). ``None``: ``UCL_y(y*, y*) + U_y_margin``, the floor
        of a perfect output match plus an absolute budget (scores live in [0, 1]), capped at
        the unedited factuals' own ``UCL_y(b(X'), y*)`` so that the certificate always asks
        for an improvement on them (a given ``U_y`` they already pass is logged as a warning).
    U_x_margin : relative input-side budget used when ``U_x`` is None. Default 0.25.
    U_y_margin : absolute output-side budget (squared score units) used when ``U_y`` is None.
        Default 0.15 (at n = 50 this certifies roughly OT(y) <= 0.15-0.2).
    eta_l, eta_r : initial interval [l, r] of the trade-off eta. Defaults 0.2 and 1.0.
    kappa : interval-narrowing factor. Default 0.05.
    stop : stopping rule, a key of :data:`STOP_RULES`. ``"stalled"`` (default): run to T, or
        stop after ``patience`` consecutive certified iterations whose selected candidate
        improved Q by at most ``tol``; the returned iterate is the best certified one, so the
        search keeps trading input proximity in the N-direction view for output alignment
        while the certificate holds. ``"certified"``: stop at the first certified edited
        iterate, the least intervention the search reaches that the certificate accepts (lower
        OT(x), higher OT(y); with few directions it also avoids fitting the N projections
        while the many-direction OT(x) grows). ``"ot_y"``: stop at the first certified edited
        iterate whose reported OT(y) (trimmed at ``metric_delta``) is at or below ``stop_ot_y``,
        e.g. a baseline's OT(y), to compare methods at matched output alignment; if no iterate
        gets there, the run goes on to T (it never stops on a stall) and returns the best
        certified edited iterate of all T (min Q under the final eta; the last if none is
        certified), which can differ from what a ``"stalled"`` run that stopped early returns;
        the metrics say ``stop_ot_y_reached: false``. DCE honours the same rules.
    stop_ot_y : the OT(y) level of ``stop="ot_y"`` (squared score units); required there and
        rejected with the other rules.
    patience : with ``stop="stalled"``, stop early after this many consecutive feasible
        iterations whose selected candidate improved Q by at most ``tol`` (relative). Default 5.
    tol : relative improvement counted as a stall. Default 1e-6.

    certificate : the confidence rule of the certificate, a key of :data:`CERTIFICATE_RULES`.
        ``"dkw"`` (default): finite-sample DKW quantile bands, bounds on the **squared** scale
        (``U_x``, ``U_y`` squared). ``"bootstrap"``: the DISCOVER reference code's basic bootstrap
        of each sample-trimmed distance, bounds on the **unsquared** scale (``U_x``, ``U_y``
        unsquared, e.g. the paper's 0.8 and 0.5), each input direction at level alpha / N
        (docs/reference/certificates.md). The thresholds are in the chosen rule's scale; the
        result reports both rules' verdicts (the other rule's thresholds are the same distances,
        squared or square-rooted, or its own calibration when U is None). Calibration when a
        threshold is None under ``"bootstrap"``: ``U_x = sqrt(U_x_margin * mean_k Var(theta_k . X'))``
        (a budget relative to the factuals' spread, the bootstrap floor of X' itself being 0) and
        ``U_y = sqrt(U_y_margin)``, capped at the factuals' own bound.
    bootstrap_resamples : B, resampling index vectors of the bootstrap rule (drawn once per run
        from ``seed`` and reused at every iteration, like the reference code). Default 200.

    Proposals (OT-guided cone sampling)
    -----------------------------------
    cone_angle : half-angle phi (radians) of the cone around -g. Default pi/4.
    step : lambda_max; a numerical move is lambda ~ U(0, step) times each feature's range
        (R_max - R_min, encoded units, see ``step_range``), along the cone direction restricted
        to the row's edited numerical features (renormalised). Default 0.2.
    step_range : the range R_max - R_min that scales numerical steps, a key of
        :data:`STEP_RANGES`. ``"training"`` (default): the training range (widened to the
        factual sample's values). ``"factuals"``: the factual sample's own min-max, as the
        released DISCOVER notebook (``use_global_ranges=False``); heavy-tailed counts then move
        by the spread of the sample rather than of the whole training split (features constant
        in the sample keep the training range; an integer feature's range is at least 1 / ``step``
        units, so that a full step reaches the next integer). Values are clipped to the training
        range either way; a factual outside it widens only its own row's bounds, to its value.
    restart_prob : probability that an edited row's numerical move restarts from the value of a
        random factual row (one donor row per edited row and candidate) before its cone step, as the
        reference code's continuous moves do: large moves that keep each marginal close to the
        factuals'. Default 0 (every step starts from the current value).
    row_choice : how the editable rows are chosen, a key of :data:`ROW_CHOICES`. ``"top_k"``
        (default): the k rows with the largest q_i. ``"stall"``: the top k, except after an
        iteration whose selected candidate was not accepted, when k rows are drawn with
        probability proportional to q_i (a stalled top-k set would otherwise stay the same).
    accept : which candidate replaces the iterate, a key of :data:`ACCEPT_RULES`. ``"improve"``
        (default): the best candidate only if it lowers Q (the no-op candidate). ``"best"``: the
        best edited candidate always, even when Q goes up (the reference code's rule); the run
        still returns its best certified iterate.
    categorical_step : maximum step length in a categorical's embedding space. Default 1.2.
    temperature : tau of the categorical decoding p(v) ~ exp(-||E_p[v] - z||^2 / tau).
        Default 2.0.
    embedding_dim : r of the categorical embeddings; ``None``: min(|V|, max(2, ceil(log2|V|) + 1)).
    guidance : use the input-side OT guidance field (False: isotropic proposals, an ablation).
    edit_numerical, edit_categorical : which feature types may be edited (ablations).
    actionability : feature name -> ``"increasing"`` (never below its factual value / level
        index), ``"decreasing"`` or ``"fixed"``; schema-immutable features are never edited.

    Genetic strategy
    ----------------
    generations : generations per outer iteration (each costs one model call). Default 3.
    crossover_prob : probability that a child is a crossover of two parents. Default 0.8.
    gene_swap_prob : per editable row, probability of taking the second parent's row. Default 0.5.
    mutation_prob : per row, probability of a cone-guided mutation of a child. Default 0.5.
    elite : candidates carried unchanged to the next generation. Default 2.

    Result metrics and engineering
    ------------------------------
    metric_projections : directions of the reported OT(x). Default 5000.
    metric_delta : trimming of the reported OT(x) and OT(y). Default 0.1.
    holdout_sets : fresh sets of N directions, never seen by the search, on which the returned
        iterate's input certificate is rechecked (U_x recalibrated on each set as in the run);
        the share that passes is the metric ``certified_x_holdout``. The certificate holds for
        the run's own directions, which the search has adapted to; this share says how much of
        it carries over to other directions. 0 skips it (metric None). Default 100.
    mmd_sigma : bandwidth of the Gaussian kernel of the reported MMD^2. Default 1.0.
    max_elements : size (floats) of the reused sort buffer, i.e. candidates x N x n per chunk.
        When a batch needs more, candidates are screened with the fixed-plan row scores and
        only the best ``max_elements // (N n)`` are scored exactly (the others are never
        selected, so the no-op guarantee holds). Default 4_000_000 (32 MB).
    budget : BlackBox budget name the model queries count against. Default ``"discover"``.
    seed : seed of directions, embeddings, proposals (same seed, same result). Default 0.
    """

    n_projections: int = 10
    resample_directions: bool = False
    top_k: int = 3
    h: int = 1
    trials: int = 200
    max_iter: int = 100
    strategy: str = "monte_carlo"
    recombine: bool = True
    delta: float = 0.01
    alpha: float = 0.05
    U_x: float | None = None
    U_y: float | None = None
    U_x_margin: float = 0.25
    U_y_margin: float = 0.15
    eta_l: float = 0.2
    eta_r: float = 1.0
    kappa: float = 0.05
    stop: str = "stalled"
    stop_ot_y: float | None = None
    patience: int = 5
    tol: float = 1e-6
    certificate: str = "dkw"
    bootstrap_resamples: int = 200
    cone_angle: float = math.pi / 4
    step: float = 0.2
    step_range: str = "training"
    restart_prob: float = 0.0
    row_choice: str = "top_k"
    accept: str = "improve"
    categorical_step: float = 1.2
    temperature: float = 2.0
    embedding_dim: int | None = None
    guidance: bool = True
    edit_numerical: bool = True
    edit_categorical: bool = True
    actionability: Mapping[str, str] = field(default_factory=dict)
    generations: int = 3
    crossover_prob: float = 0.8
    gene_swap_prob: float = 0.5
    mutation_prob: float = 0.5
    elite: int = 2
    metric_projections: int = 5000
    metric_delta: float = 0.1
    holdout_sets: int = 100
    mmd_sigma: float = 1.0
    max_elements: int = 4_000_000
    budget: str = "discover"
    seed: int = 0

    def __post_init__(self) -> None:
        wrong = _type_problems(self)
        if wrong:
            raise ConfigError(f"invalid DISCOVER settings: {'; '.join(wrong)}")
        for f in dataclasses.fields(self):  # numpy scalars -> Python numbers (JSON-safe metadata)
            if isinstance(getattr(self, f.name), np.generic):
                object.__setattr__(self, f.name, getattr(self, f.name).item())
        if isinstance(self.actionability, Mapping):  # a snapshot: later edits of the caller's dict do not leak in
            object.__setattr__(self, "actionability", dict(self.actionability))
        checks = [
            ("n_projections", self.n_projections >= 1), ("top_k", self.top_k >= 1), ("h", self.h >= 1),
            ("trials", self.trials >= 1), ("max_iter", self.max_iter >= 0),
            ("delta", 0.0 < self.delta < 0.5), ("alpha", 0.0 < self.alpha < 1.0),
            ("U_x", self.U_x is None or self.U_x > 0), ("U_y", self.U_y is None or self.U_y > 0),
            ("U_x_margin", self.U_x_margin >= 0), ("U_y_margin", self.U_y_margin >= 0),
            ("eta_l", 0.0 <= self.eta_l <= self.eta_r <= 1.0), ("kappa", 0.0 <= self.kappa < 1.0),
            ("patience", self.patience >= 1), ("tol", self.tol >= 0),
            ("cone_angle", 0.0 < self.cone_angle <= math.pi), ("step", self.step > 0),
            ("categorical_step", self.categorical_step >= 0), ("temperature", self.temperature > 0),
            ("embedding_dim", self.embedding_dim is None or self.embedding_dim >= 1),
            ("generations", self.generations >= 1), ("crossover_prob", 0 <= self.crossover_prob <= 1),
            ("gene_swap_prob", 0 <= self.gene_swap_prob <= 1),
            ("mutation_prob", 0 <= self.mutation_prob <= 1),
            ("elite", self.elite >= 0), ("metric_projections", self.metric_projections >= 1),
            ("metric_delta", 0.0 <= self.metric_delta < 0.5), ("holdout_sets", self.holdout_sets >= 0),
            ("mmd_sigma", self.mmd_sigma > 0),
            ("max_elements", self.max_elements >= 1), ("seed", self.seed >= 0),
            ("bootstrap_resamples", self.bootstrap_resamples >= 2), ("restart_prob", 0 <= self.restart_prob <= 1),
        ]
        bad = [name for name, ok in checks if not ok]
        if bad:
            values = {name: getattr(self, name) for name in bad}
            raise ConfigError(f"invalid DISCOVER settings: {values} (see DiscoverSettings for valid ranges)")
        if not (self.edit_numerical or self.edit_categorical):
            raise ConfigError("DISCOVER settings: edit_numerical and edit_categorical cannot both be False")
        if not isinstance(self.actionability, Mapping):
            raise ConfigError(f"DISCOVER settings: actionability must map feature names to rules "
                              f"({', '.join(ACTIONABILITY)}), got {type(self.actionability).__name__}")
        for name, rule in self.actionability.items():
            if rule not in ACTIONABILITY:
                raise ConfigError(f"actionability of {name!r}: unknown rule {rule!r}; valid: "
                                  f"{', '.join(ACTIONABILITY)}")
        if self.step_range not in STEP_RANGES:
            raise ConfigError(f"unknown DISCOVER step_range {self.step_range!r}; valid: {', '.join(STEP_RANGES)}")
        for name, valid in (("certificate", CERTIFICATE_RULES), ("row_choice", ROW_CHOICES),
                            ("accept", ACCEPT_RULES)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"unknown DISCOVER {name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        if self.stop not in STOP_RULES:
            raise ConfigError(f"unknown DISCOVER stop rule {self.stop!r}; valid: {', '.join(STOP_RULES)}")
        if (self.stop == "ot_y") != (self.stop_ot_y is not None):
            raise ConfigError("DISCOVER settings: stop_ot_y (an OT(y) level >= 0) is required with stop='ot_y' "
                              f"and only used there (got stop={self.stop!r}, stop_ot_y={self.stop_ot_y!r})")
        if self.stop_ot_y is not None and not self.stop_ot_y >= 0:
            raise ConfigError(f"invalid DISCOVER settings: {{'stop_ot_y': {self.stop_ot_y!r}}} (must be >= 0)")
        from recourselab.discover.strategies import get_strategy

        get_strategy(self.strategy)  # unknown names list the valid ones

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> DiscoverSettings:
        """Build settings from keyword arguments; unknown keys list the valid ones."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in kwargs if k not in valid]
        if unknown:
            hints = [f"{k!r}{did_you_mean(k, valid)}" for k in unknown]
            raise ConfigError(f"unknown DISCOVER setting(s) {', '.join(hints)}; valid: {', '.join(valid)}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping of every setting."""
        d = dataclasses.asdict(self)
        d["actionability"] = dict(self.actionability)
        return d

    def at_level(self, ot_y: float) -> bool:
        """Whether an iterate with reported OT(y) ``ot_y`` meets the stop level (always, unless stop='ot_y')."""
        return self.stop != "ot_y" or ot_y <= self.stop_ot_y

    def stops_early(self, certified_edit: bool, ot_y: float) -> bool:
        """Whether the ``certified`` / ``ot_y`` rules end the run at this iterate.

        ``certified_edit`` says the iterate is certified feasible and edits at least one row.
        """
        return self.stop != "stalled" and certified_edit and self.at_level(ot_y)


__all__ = ["ACCEPT_RULES", "ACTIONABILITY", "CERTIFICATE_RULES", "ROW_CHOICES", "STOP_RULES", "DiscoverSettings"]
