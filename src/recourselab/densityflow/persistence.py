"""DensityFlow persistence: state dicts and a JSON config whose sha256 ties the files together
(:class:`PersistenceMixin` of :class:`~recourselab.densityflow.DensityFlow`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
from pathlib import Path
from typing import Any, Self

import numpy as np
import torch

from recourselab.data.schema import Schema
from recourselab.densityflow.config import is_int, is_num
from recourselab.errors import (
    ArtifactError,
    ChecksumError,
    DataError,
    MissingArtifactError,
    RecourselabError,
)
from recourselab.io import RESTORE_HINT, error_reason, json_bytes, read_json, restore_hint, write_bytes

log = logging.getLogger(__name__)


def _check_meta(meta: dict[str, Any], path: Path) -> None:
    """Raise an :class:`ArtifactError` naming ``path`` if a saved ``densityflow.json`` has a bad field."""
    d = meta["d"]
    checks = [
        ("config", "an object of settings", isinstance(meta["config"], dict)),
        ("d", "an integer >= 1", is_int(d) and d >= 1),
        ("n_classes", "an integer >= 2", is_int(meta["n_classes"]) and meta["n_classes"] >= 2),
        ("C", "a finite number > 0", is_num(meta["C"]) and meta["C"] > 0),
        ("mutable", "a list of d booleans", isinstance(meta["mutable"], list)
         and all(isinstance(v, bool) for v in meta["mutable"]) and (not is_int(d) or len(meta["mutable"]) == d)),
        ("monotone", "a list of d values -1, 0 or 1", "monotone" not in meta or (
            isinstance(meta["monotone"], list) and all(is_int(v) and v in (-1, 0, 1) for v in meta["monotone"])
            and (not is_int(d) or len(meta["monotone"]) == d))),
        ("queries_used", "an integer >= 0",
         is_int(meta.get("queries_used", 0)) and meta.get("queries_used", 0) >= 0),
        ("dataset", "a dataset name or null", meta.get("dataset") is None or isinstance(meta["dataset"], str)),
        ("weights_sha256", "an object of sha256 per weights file", isinstance(meta.get("weights_sha256", {}), dict)
         and all(isinstance(v, str) for v in meta.get("weights_sha256", {}).values())),
    ]
    bad = [f"{key} ({rule}, got {meta.get(key)!r:.60})" for key, rule, ok in checks if not ok]
    if bad:
        raise ArtifactError(f"{path} is damaged: {'; '.join(bad)}; {RESTORE_HINT}")


class PersistenceMixin:
    """:meth:`save`, :meth:`load` and the single files of :class:`~recourselab.densityflow.DensityFlow`."""

    #: The files of a saved DensityFlow.
    FILES = ("surrogate.pt", "generator.pt", "densityflow.json")
    WEIGHT_FILES = ("surrogate.pt", "generator.pt")

    def file_bytes(self, name: str) -> bytes:
        """The contents of one of :attr:`FILES` (torch state dicts; the JSON config holds their sha256)."""
        self._require_fit()
        if name == "densityflow.json":
            weights = {f: hashlib.sha256(self.file_bytes(f)).hexdigest() for f in self.WEIGHT_FILES}
            return json_bytes({"config": dataclasses.asdict(self.config), "d": int(self.field.mutable.numel()),
                               "weights_sha256": weights,
                               "n_classes": self.n_classes, "C": self.C, "queries_used": int(self.queries_used_),
                               "mutable": self.field.mutable.cpu().numpy().astype(bool).tolist(),
                               "monotone": self.field.monotone.cpu().numpy().astype(int).tolist(),
                               "dataset": None if self.schema is None else self.schema.dataset})
        module = {"surrogate.pt": self.surrogate, "generator.pt": self.field}[name]
        buf = io.BytesIO()
        torch.save(module.state_dict(), buf)
        return buf.getvalue()

    def write_file(self, name: str, path: str | Path) -> Path:
        """Write one of :attr:`FILES` atomically to ``path``."""
        return write_bytes(path, self.file_bytes(name))

    def save(self, directory: str | Path) -> Path:
        """Write ``surrogate.pt``, ``generator.pt`` (state dicts) and ``densityflow.json``.

        All three are serialised before the first is written, so a model that cannot be
        serialised leaves an earlier save in ``directory`` whole; ``densityflow.json`` records
        the sha256 of both weights files, so :meth:`load` refuses a mix of two saves (one
        interrupted between its files).
        """
        directory = Path(directory)
        contents = {name: self.file_bytes(name) for name in self.FILES}
        for name, data in contents.items():
            write_bytes(directory / name, data)
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, schema: Schema | None = None, device: str = "cpu") -> Self:
        """Restore a saved DensityFlow (weights loaded with ``weights_only=True``)."""
        directory = Path(directory)
        if not (directory / "densityflow.json").is_file():
            raise MissingArtifactError(f"no saved DensityFlow in {directory} (densityflow.json is missing)")
        meta_path = directory / "densityflow.json"
        meta = read_json(meta_path, keys=["config", "d", "n_classes", "C", "mutable"])
        _check_meta(meta, meta_path)
        saved = meta.get("dataset")
        if schema is not None:
            if (saved is not None and saved != schema.dataset) or schema.n_encoded != meta["d"]:
                raise DataError(f"the DensityFlow in {directory} was trained for dataset {saved!r} ({meta['d']} "
                                f"encoded columns), not for the given schema of {schema.dataset!r} "
                                f"({schema.n_encoded} columns)")
        elif saved is not None:
            log.warning("the DensityFlow in %s was trained for dataset %r but is loaded without its schema: its "
                        "counterfactuals will not be snapped to valid levels and ranges, nor decoded to original "
                        "units; pass schema= (e.g. Schema.load of the prepared split's schema.json)", directory, saved)
        try:
            # saves from before monotone rules lack the key: the schema's rules apply, if it has any
            signs = np.array(meta["monotone"]) if "monotone" in meta else None
            flow = cls(schema=schema, mutable=np.array(meta["mutable"]), monotone=signs, device=device,
                       **meta["config"])
            flow.build(meta["d"], meta["n_classes"], meta["C"])
        except (RecourselabError, TypeError, ValueError) as err:
            raise ArtifactError(f"{meta_path} does not describe a valid DensityFlow ({error_reason(err)}); "
                                f"{RESTORE_HINT}") from err
        for name, module in (("surrogate.pt", flow.surrogate), ("generator.pt", flow.field)):
            path = directory / name
            if not path.is_file():
                raise MissingArtifactError(f"the DensityFlow in {directory} lacks its weights file {name}")
            data = path.read_bytes()
            expected = meta.get("weights_sha256", {}).get(name)  # older saves lack it: not checked
            if expected is not None and hashlib.sha256(data).hexdigest() != expected:
                stage = "distill" if meta.get("queries_used", 0) else "train_flow"  # distill records its queries
                raise ChecksumError(f"{path} is not the weights file that {meta_path.name} was saved with (sha256 "
                                    f"differs; truncated, altered, a save interrupted between its files, or a file "
                                    f"from another model); {restore_hint(path, stage=stage, dataset=saved)}")
            try:
                state = torch.load(io.BytesIO(data), map_location=flow.device, weights_only=True)
            except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one message
                raise ArtifactError(f"cannot load {path} ({error_reason(err)}); {RESTORE_HINT}") from err
            try:
                module.load_state_dict(state)
            except Exception as err:  # noqa: BLE001 - keys or shapes that the saved settings do not build
                lines = [line.strip() for line in str(err).splitlines() if line.strip()]
                more = f" and {len(lines) - 2} more" if len(lines) > 2 else ""
                raise ArtifactError(f"{path} does not fit the networks that {meta_path.name} describes "
                                    f"({' '.join(lines[:2])}{more}); {RESTORE_HINT}") from err
        flow.queries_used_ = meta.get("queries_used", 0)
        flow.surrogate.eval()
        flow.field.eval()
        return flow
