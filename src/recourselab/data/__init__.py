"""Data layer: sources, synthetic generators, validation, schema/encoder and splits."""

from recourselab.data.datasets import (
    LABEL,
    ROW_ID,
    SPLITS,
    PreparedSplits,
    RawDataset,
    dataset_from_params,
    dataset_options,
    dataset_spec,
    load_dataset,
    load_prepared,
    prepare_splits,
    validate_frame,
)
from recourselab.data.feature import Feature
from recourselab.data.registry import BUILTIN_DATASETS, DatasetSpec
from recourselab.data.schema import Schema
from recourselab.data.split import stratified_split

__all__ = [
    "BUILTIN_DATASETS", "LABEL", "ROW_ID", "DatasetSpec", "Feature", "PreparedSplits",
    "RawDataset", "SPLITS", "Schema", "dataset_from_params", "dataset_options", "dataset_spec", "load_dataset",
    "load_prepared", "prepare_splits", "stratified_split", "validate_frame",
]
