"""DensityFlow training: the alternating surrogate / generator loop, its learning-rate
schedule and resumable checkpoints (:class:`TrainingMixin` of :class:`~recourselab.densityflow.DensityFlow`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from recourselab.data.rows import encode_rows
from recourselab.densityflow.config import DensityFlowConfig, class_labels
from recourselab.densityflow.ode import VelocityField, integrate
from recourselab.densityflow.surrogate import Surrogate, noise_bound, refresh_spectral_norms
from recourselab.errors import (
    DataError,
    RecourselabError,
)
from recourselab.io import error_reason, write_bytes
from recourselab.progress import bar
from recourselab.provenance import code_fingerprint
from recourselab.rng import torch_generator
from recourselab.runtime import torch_seeded

log = logging.getLogger(__name__)


@dataclass
class TrainLog:
    """Per-epoch means of the training losses."""

    rows: list[dict[str, float]] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


@contextmanager
def frozen(module: torch.nn.Module):  # noqa: ANN202
    """Turn off ``module``'s parameter gradients inside the block, back on however it ends."""
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)


def _lr_lambda(cfg: DensityFlowConfig, base_lr: float, epochs: int):  # noqa: ANN202
    warm = min(cfg.warmup_epochs, max(epochs - 1, 0))
    floor = cfg.lr_min / base_lr

    def factor(epoch: int) -> float:
        if epoch < warm:
            return (epoch + 1) / (warm + 1)
        progress = (epoch - warm) / max(1, epochs - warm)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


class TrainingMixin:
    """Network construction, the training losses and :meth:`fit` of :class:`~recourselab.densityflow.DensityFlow`."""

    def build(self, d: int, n_classes: int, C: float) -> None:
        """Create the networks for width ``d``, ``n_classes`` classes and noise box ``C``."""
        cfg = self.config
        self.n_classes, self.C = n_classes, C
        mutable = torch.as_tensor(self._mutable_mask(d))
        monotone = torch.as_tensor(self._monotone_signs(d))
        with torch_seeded(cfg.seed):  # initial weights from the seed, also with tasks in threads
            self.surrogate = Surrogate(d, n_classes, hidden=cfg.hidden, score_mode=cfg.score_mode).to(self.device)
            self.field = VelocityField(d, n_classes, mutable, hidden=cfg.hidden, embed_dim=cfg.embed_dim,
                                       spectral=cfg.field_spectral_norm, monotone=monotone).to(self.device)

    def density_margin(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor | float:
        """log tau, or per-row margins from ``density_quantile`` over real rows ``x`` of labels ``y``."""
        cfg = self.config
        if cfg.density_quantile is None:
            return cfg.margin
        with torch.no_grad():
            s = self.surrogate.score(x, y)
            per_class = torch.stack([torch.quantile(s[y == c], cfg.density_quantile) if (y == c).any()
                                     else s.new_tensor(cfg.margin) for c in range(self.n_classes)])
        return per_class[target]

    def generator_loss(self, x: torch.Tensor, target: torch.Tensor, *,
                       y: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Validity + cost + density loss of the flow from ``x`` (n, d) with labels ``y`` to ``target`` (n,),
        solved with the training solver (:meth:`DensityFlowConfig.train_solver`)."""
        cfg = self.config
        z, energy, _ = integrate(self.field, x, target, adjoint=cfg.adjoint, **cfg.train_solver())
        z = z.clamp(-self.C, self.C)
        valid = self.surrogate.validity_loss(z, target)
        cost = energy.mean()
        margin = cfg.margin if y is None else self.density_margin(x, y, target)
        den = torch.relu(margin - self.surrogate.score(z, target)).mean()
        loss = cfg.lambda_valid * valid + cfg.lambda_cost * cost + cfg.lambda_den * den
        return loss, {"valid": valid.item(), "cost": cost.item(), "density": den.item()}

    def fit(self, X: np.ndarray, y: np.ndarray, *, progress: bool | None = None,
            checkpoint_dir: str | Path | None = None, checkpoint_seconds: float = 60.0) -> Self:
        """Train surrogate and generator with alternating AdamW steps (one each per batch).

        A fit that fails or is interrupted leaves the model as it was (unfitted, or its earlier fit).

        Parameters
        ----------
        X : (n, d) encoded training rows; y : (n,) class indices 0..K-1.
        progress : a progress bar over epochs: True shows it, False hides it, None shows it only
            on an interactive terminal outside CI (:func:`recourselab.progress.bar`).
        checkpoint_dir : folder for a resumable training state (networks, EMA copies, optimizers,
            schedules, random state, log), written atomically at the end of an epoch once
            ``checkpoint_seconds`` have passed since the last write. Its file name hashes the
            settings and the training data, so a later ``fit`` with the same settings and data
            (e.g. after a crash or a pre-empted GPU job) resumes from it, with exactly the result
            of an uninterrupted run, and other settings never pick it up. It is deleted when
            training completes. None: no checkpoints.
        """
        cfg = self.config
        X = encode_rows(X, self.schema, what="fit rows")  # a refit may change the width (no schema)
        schema_classes = None if self.schema is None else self.schema.n_classes
        y = class_labels(y, len(X), "fit labels", schema_classes)
        present = np.unique(y)
        if len(present) < 2:
            raise DataError("DensityFlow needs at least two classes in the training labels")
        n_classes = schema_classes if schema_classes is not None else int(y.max()) + 1
        if len(present) < n_classes:
            missing = sorted(set(range(n_classes)) - set(present.tolist()))
            raise DataError(f"fit labels have no rows of class(es) {missing} (of 0..{n_classes - 1}): the surrogate "
                            "cannot learn their density, so no flow could target them")
        if cfg.max_train_rows is not None and len(y) > cfg.max_train_rows:
            from recourselab.data.split import stratified_subsample

            keep = stratified_subsample(y, cfg.max_train_rows, cfg.seed)
            X, y = X[keep], y[keep]
        previous = (self.surrogate, self.field, self.n_classes, self.C, self.log_, self.queries_used_)
        try:
            self._train(X, y, n_classes, progress=progress, checkpoint_dir=checkpoint_dir,
                        checkpoint_seconds=checkpoint_seconds)
        except BaseException:
            # a failed or interrupted fit leaves the model as it was: unfitted, or the earlier fit
            self.surrogate, self.field, self.n_classes, self.C, self.log_, self.queries_used_ = previous
            raise
        return self

    def _train(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, progress: bool | None,
               checkpoint_dir: str | Path | None, checkpoint_seconds: float) -> None:
        """The body of :meth:`fit` on checked rows ``X`` (n, d) and labels ``y`` (n,)."""
        cfg = self.config
        self.build(X.shape[1], n_classes, noise_bound(X, cfg.beta, cfg.c_floor))
        Xt, yt = self._tensor(X), torch.tensor(y, device=self.device)
        gen = torch_generator("densityflow.train", cfg.seed)

        opt_phi = torch.optim.AdamW(self.surrogate.parameters(), lr=cfg.lr_phi, weight_decay=cfg.weight_decay)
        opt_g = torch.optim.AdamW(self.field.parameters(), lr=cfg.lr_g, weight_decay=cfg.weight_decay)
        n_epochs = max(cfg.epochs, math.ceil(cfg.min_steps / math.ceil(len(y) / cfg.batch_size)))
        sched = [torch.optim.lr_scheduler.LambdaLR(o, _lr_lambda(cfg, o.defaults["lr"], n_epochs))
                 for o in (opt_phi, opt_g)]
        ema_fn = get_ema_multi_avg_fn(cfg.ema_decay)
        ema_s = AveragedModel(self.surrogate, multi_avg_fn=ema_fn, use_buffers=True)
        ema_f = AveragedModel(self.field, multi_avg_fn=ema_fn, use_buffers=True)

        self.log_ = TrainLog()
        self.queries_used_ = 0  # new networks: no distillation yet
        state = {"surrogate": self.surrogate, "field": self.field, "ema_surrogate": ema_s, "ema_field": ema_f,
                 "opt_phi": opt_phi, "opt_g": opt_g, "sched_phi": sched[0], "sched_g": sched[1]}
        ckpt = None if checkpoint_dir is None else Path(checkpoint_dir) / f"densityflow-{self._fit_key(X, y)}.pt"
        first = self._resume(ckpt, state, gen, n_epochs) if ckpt is not None and ckpt.exists() else 0
        last_write = started = time.monotonic()
        report_every = math.ceil(n_epochs / 10)  # at most ten progress lines per fit in the stage logs (and the last)

        # a bar closes itself when the loop ends, however it ends
        epochs = bar(range(first, n_epochs), total=n_epochs, initial=first, desc=f"DensityFlow seed {cfg.seed}",
                     unit="epoch", enabled=progress)
        for epoch in epochs:
            perm = torch.randperm(len(yt), generator=gen).to(self.device)
            sums: dict[str, float] = {"nce": 0.0, "loss": 0.0, "valid": 0.0, "cost": 0.0, "density": 0.0}
            n_batches = 0
            for start in range(0, len(perm), cfg.batch_size):
                idx = perm[start:start + cfg.batch_size]
                xb, yb = Xt[idx], yt[idx]
                nce = self.surrogate.nce_loss(xb, yb, self._box_noise(len(idx), Xt.shape[1], gen), cfg.lambda_noise)
                opt_phi.zero_grad()
                nce.backward()
                opt_phi.step()

                with frozen(self.surrogate):
                    loss, parts = self.generator_loss(xb, self._flip(yb, gen), y=yb)
                    opt_g.zero_grad()
                    loss.backward()
                    opt_g.step()
                ema_s.update_parameters(self.surrogate)
                ema_f.update_parameters(self.field)
                sums["nce"] += nce.item()
                sums["loss"] += loss.item()
                for k, v in parts.items():
                    sums[k] += v
                n_batches += 1
            for s in sched:
                s.step()
            row = {"epoch": epoch, **{k: v / n_batches for k, v in sums.items()}}
            self.log_.rows.append(row)
            if not epochs.disable:
                epochs.set_postfix(loss=f"{row['loss']:.4f}", refresh=False)
            log.debug("epoch %d: %s", epoch, row)
            if (epoch + 1) % report_every == 0 or epoch + 1 == n_epochs:
                elapsed = time.monotonic() - started
                left = elapsed / (epoch + 1 - first) * (n_epochs - epoch - 1)
                log.info("DensityFlow training (seed %d): epoch %d/%d, loss %.4f, valid %.4f, cost %.4f, "
                         "density %.4f; %.0f s, about %.0f s left", cfg.seed, epoch + 1, n_epochs, row["loss"],
                         row["valid"], row["cost"], row["density"], elapsed, left)
            if ckpt is not None and epoch + 1 < n_epochs and time.monotonic() - last_write >= checkpoint_seconds:
                self._checkpoint(ckpt, state, gen, epoch)
                last_write = time.monotonic()
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
        # Inference and distillation use the EMA weights. The EMA also averaged the spectral-norm
        # power-iteration vectors, which are then no longer singular vectors of the averaged
        # weights: re-run the iterations, then eval mode freezes them.
        self.surrogate.load_state_dict(ema_s.module.state_dict())
        self.field.load_state_dict(ema_f.module.state_dict())
        refresh_spectral_norms(self.surrogate)
        refresh_spectral_norms(self.field)

    def _fit_key(self, X: np.ndarray, y: np.ndarray) -> str:
        """Hash of the settings, the device type, the mutable mask, this package's source and the
        (subsampled) training data of one ``fit`` (a checkpoint of other code, immutables or device
        type is never resumed: CUDA and CPU arithmetic differ)."""
        h = hashlib.sha256(json.dumps(dataclasses.asdict(self.config), sort_keys=True).encode())
        h.update(self.device.type.encode())
        h.update(self._mutable_mask(X.shape[1]).tobytes())
        h.update(code_fingerprint("recourselab.densityflow").encode())
        h.update(np.ascontiguousarray(X, dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]

    def _checkpoint(self, path: Path, state: dict[str, Any], gen: torch.Generator, epoch: int) -> None:
        blob = {name: obj.state_dict() for name, obj in state.items()}
        blob |= {"epoch": epoch, "generator": gen.get_state(), "log": self.log_.rows}
        buf = io.BytesIO()
        torch.save(blob, buf)
        write_bytes(path, buf.getvalue())
        log.debug("checkpoint after epoch %d: %s", epoch, path)

    def _resume(self, path: Path, state: dict[str, Any], gen: torch.Generator, n_epochs: int) -> int:
        """Load a checkpoint into ``state`` and ``gen``; returns the first epoch still to run."""
        try:
            # CPU: the generator state must stay there; load_state_dict moves the rest to its device.
            blob = torch.load(path, map_location="cpu", weights_only=True)
            for name, obj in state.items():
                obj.load_state_dict(blob[name])
            gen.set_state(blob["generator"])
            epoch = int(blob["epoch"])
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint gets the same message
            raise RecourselabError(f"cannot resume DensityFlow training from checkpoint {path} ({error_reason(err)}); "
                                   "delete the file to train from scratch") from err
        self.log_.rows = [dict(r) for r in blob["log"]]
        log.info("resuming DensityFlow training after epoch %d of %d from %s", epoch + 1, n_epochs, path)
        return epoch + 1
