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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recourselab.errors import ConfigError, did_you_mean
from recourselab.fields import plain_numbers, problems, setting

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
    top_k : k, rows editable per outer iteration (the top-k rows by row score q_i). Default 6
        (the paper's is 3).
    h : features edited per selected row and candidate (a categorical counts as one feature).
        Default 1 (one feature per row and candidate: the cheapest moves in OT(x)).
    trials : M, candidates proposed per outer iteration (the current X is always added as a
        no-op candidate, so Q under the iteration's eta never increases). Default 200.
    max_iter : T, outer iterations. Default 200 (the paper's is 100).

    The search-budget defaults (M 200 as the paper's released configuration; T 200, k 6, h 1 and
    ``step`` 0.2) are what ``bench/discover.py`` measures (its figures: docs/results.md); the
    paper's *reference* speed configuration is N 10, T 20, M 10, k 3, h 3 (step 0.1, the
    released code's ``continuous_step``).
    strategy : proposal strategy, a key of :data:`~recourselab.discover.strategies.STRATEGIES`
        (``"monte_carlo"`` or ``"genetic"``), checked against that registry by the solver (and
        at stage start-up by :func:`recourselab.pipeline.validate.validate_params`). Default
        ``"monte_carlo"``.
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
    eta_l, eta_r : initial interval [l, r] of the trade-off eta. Defaults 0.2 and 0.7 (the paper's r is
        1.0; with restart moves, 0.7 keeps weight on the input side while the output side fails).
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
        factuals'. Default 1 (0: every step starts from the current value, the paper's moves).
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
    repair : when the search ends without a certified iterate, revert edited rows to their
        factuals, one at a time and without model queries, while that lowers
        ``max(UCL_x / U_x, UCL_y / U_y)``, until the certificate holds (:mod:`recourselab.discover.repair`).
        Default True.
    polish_iter : when the repair cannot certify either, up to this many polish steps on the
        iterate closest to certification: each scores ``trials`` one-row proposal moves (one model
        call) and the reverts of the edited rows, and keeps the candidate that lowers the summed
        violation of the two thresholds most, until the certificate holds
        (:func:`recourselab.discover.repair.polish`). 0 turns it off. Default 200.
    edit_numerical, edit_categorical : which feature types may be edited (ablations).
    actionability : feature name -> ``"increasing"`` (never below its factual value / level
        index), ``"decreasing"`` or ``"fixed"``, on top of the schema's monotone features (which
        follow their own rule; here they may only be fixed); schema-immutable features are never edited.

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

    n_projections: int = setting(10, ge=1)
    resample_directions: bool = setting(False)
    top_k: int = setting(6, ge=1)
    h: int = setting(1, ge=1)
    trials: int = setting(200, ge=1)
    max_iter: int = setting(200, ge=0)
    strategy: str = setting("monte_carlo")
    recombine: bool = setting(True)
    delta: float = setting(0.01, gt=0, lt=0.5)
    alpha: float = setting(0.05, gt=0, lt=1)
    U_x: float | None = setting(None, gt=0)
    U_y: float | None = setting(None, gt=0)
    U_x_margin: float = setting(0.25, ge=0)
    U_y_margin: float = setting(0.15, ge=0)
    eta_l: float = setting(0.2, ge=0, le=1)
    eta_r: float = setting(0.7, ge=0, le=1)
    kappa: float = setting(0.05, ge=0, lt=1)
    stop: str = setting("stalled", choices=STOP_RULES)
    stop_ot_y: float | None = setting(None, ge=0)
    patience: int = setting(5, ge=1)
    tol: float = setting(1e-6, ge=0)
    certificate: str = setting("dkw", choices=CERTIFICATE_RULES)
    bootstrap_resamples: int = setting(200, ge=2)
    cone_angle: float = setting(math.pi / 4, gt=0, le=math.pi)
    step: float = setting(0.2, gt=0)
    step_range: str = setting("training", choices=STEP_RANGES)
    restart_prob: float = setting(1.0, ge=0, le=1)
    row_choice: str = setting("top_k", choices=ROW_CHOICES)
    accept: str = setting("improve", choices=ACCEPT_RULES)
    categorical_step: float = setting(1.2, ge=0)
    temperature: float = setting(2.0, gt=0)
    embedding_dim: int | None = setting(None, ge=1)
    guidance: bool = setting(True)
    repair: bool = setting(True)
    polish_iter: int = setting(200, ge=0)
    edit_numerical: bool = setting(True)
    edit_categorical: bool = setting(True)
    actionability: Mapping[str, str] = setting(factory=dict, choices=ACTIONABILITY)
    generations: int = setting(3, ge=1)
    crossover_prob: float = setting(0.8, ge=0, le=1)
    gene_swap_prob: float = setting(0.5, ge=0, le=1)
    mutation_prob: float = setting(0.5, ge=0, le=1)
    elite: int = setting(2, ge=0)
    metric_projections: int = setting(5000, ge=1)
    metric_delta: float = setting(0.1, ge=0, lt=0.5)
    holdout_sets: int = setting(100, ge=0)
    mmd_sigma: float = setting(1.0, gt=0)
    max_elements: int = setting(4_000_000, ge=1)
    budget: str = setting("discover")
    seed: int = setting(0, ge=0)

    def __post_init__(self) -> None:
        plain_numbers(self)  # numpy scalars -> Python numbers (JSON-safe metadata)
        if not isinstance(self.actionability, Mapping):
            raise ConfigError(f"DISCOVER settings: actionability must map feature names to rules "
                              f"({', '.join(ACTIONABILITY)}), got {type(self.actionability).__name__}")
        # a snapshot: later edits of the caller's dict do not leak in
        object.__setattr__(self, "actionability", dict(self.actionability))
        for name, rule in self.actionability.items():
            if rule not in ACTIONABILITY:
                raise ConfigError(f"actionability of {name!r}: unknown rule {rule!r}; valid: "
                                  f"{', '.join(ACTIONABILITY)}")
        wrong = problems(self)
        if wrong:
            raise ConfigError(f"invalid DISCOVER settings: {'; '.join(wrong)}")
        if self.eta_l > self.eta_r:
            raise ConfigError(f"DISCOVER settings: eta_l ({self.eta_l}) must not exceed eta_r ({self.eta_r})")
        if not (self.edit_numerical or self.edit_categorical):
            raise ConfigError("DISCOVER settings: edit_numerical and edit_categorical cannot both be False")
        if (self.stop == "ot_y") != (self.stop_ot_y is not None):
            raise ConfigError("DISCOVER settings: stop_ot_y (an OT(y) level >= 0) is required with stop='ot_y' "
                              f"and only used there (got stop={self.stop!r}, stop_ot_y={self.stop_ot_y!r})")
        if not self.strategy:
            raise ConfigError("DISCOVER settings: strategy must name a proposal strategy (e.g. 'monte_carlo')")

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
