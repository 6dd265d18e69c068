"""Audit tables on a hand-made run, the HTML / Markdown rendering, and the page in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recourselab.config import Params
from recourselab.config.audit import AuditParams
from recourselab.pipeline.audit import load_run, write_audit
from recourselab.report import audit as tables
from recourselab.report.audit_html import Section, render_html, render_markdown
from tests.pipeline.audit_fixture import DATASET, N_ROWS, write_fixture


@pytest.fixture(scope="module")
def run_root(tmp_path_factory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def rows(run_root) -> pd.DataFrame:
    return tables.row_table(load_run(run_root, DATASET, Params()), AuditParams())


def test_row_table_has_every_counterfactual_with_factual_attributes(rows):
    assert rows.groupby("method").size().to_dict() == {"densityflow": N_ROWS, "discover:lightgbm": 20,
                                                       "discover:svm": 20}
    df = rows[rows["method"] == "densityflow"]
    # the sex of the factual (prepared test rows), not of the counterfactual, whose sex flipped on rows 3 and 7
    assert list(df["attr__sex"]) == ["Female" if i % 2 == 0 else "Male" for i in range(N_ROWS)]
    assert df["valid"].sum() == N_ROWS - 10  # rf rejects the 10 women with row position % 4 == 0
    assert np.isnan(df["certified"]).all() and (rows.loc[rows["model"] == "svm", "certified"] == 1).all()


def test_immutable_violations_are_counted(run_root):
    v = tables.immutable_violations(load_run(run_root, DATASET, Params()))
    df = v[v["method"] == "densityflow"].set_index("feature")
    assert df.loc["sex", "violations"] == 2 and df.loc["sex", "checked"] == N_ROWS
    assert df.loc["race", "violations"] == 0
    assert v.loc[v["method"] != "densityflow", "violations"].sum() == 0


def test_subgroup_gap_flagged_only_above_threshold(rows):
    params = AuditParams()
    subgroups = tables.subgroup_table(rows, ["sex", "race", "age"], params)
    gaps = tables.gap_table(subgroups, rows, params)
    sex = gaps[(gaps["method"] == "densityflow") & (gaps["attribute"] == "sex") & (gaps["measure"] == "validity")]
    assert sex["gap"].item() == pytest.approx(0.5) and bool(sex["flagged"].item())
    lenient = tables.gap_table(subgroups, rows, AuditParams(gap_threshold=0.6))
    assert not lenient.loc[lenient["measure"] == "validity", "flagged"].any()
    ages = set(subgroups.loc[subgroups["attribute"] == "age", "group"])
    assert ages <= {"< 25", "25-45", "45-65", ">= 65"} and len(ages) > 1


def test_certification_reason_from_the_failed_certificate(run_root):
    cert = tables.certification_table(load_run(run_root, DATASET, Params())).set_index("model")
    assert not cert.loc["lightgbm", "certified"] and cert.loc["lightgbm", "reason"] == "UCL_x 0.3 > U_x 0.1"
    assert cert.loc["svm", "certified"] and cert.loc["svm", "reason"] == ""
    assert cert.loc["svm", "repaired_rows"] == 2 and cert.loc["lightgbm", "repaired_rows"] == 0
    assert cert.loc["svm", "certified_by"] == "polish" and cert.loc["lightgbm", "certified_by"] == ""


def test_headline_numbers(rows):
    h = tables.headline(rows)
    assert h["densityflow.validity"] == pytest.approx(0.75)
    assert h["discover:lightgbm.certified"] == 0.0 and h["discover:svm.certified"] == 1.0


def test_render_escapes_and_embeds(tmp_path):
    from recourselab.report.audit_html import bar_figure

    fig = bar_figure(tmp_path / "f.png", pd.DataFrame({"k": ["a<b"], "v": [0.5]}), x="k", y=["v"], title="t",
                     ylabel="y")
    s = Section("S <1>", "s", notes=["n & m"], tables=[("cap", pd.DataFrame({"x|y": ["<script>"]}))], figures=[fig])
    page = render_html("T", [], [s])
    assert "<script>alert" not in page and "&lt;script&gt;" in page and "data:image/png;base64," in page
    md = render_markdown("T", [], [s])
    assert "| x\\|y |" in md and "![f](figures/f.png)" in md


# ---------------------------------------------------------------------------------------------- browser

def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium not installed (Debian: `apt-get install -y chromium`); the browser render "
                "of the audit report is not checked")


def _browse(page: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
           f"--user-data-dir={page.parent / 'chromium-profile'}", *extra, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    """Console messages (console.error / uncaught errors) of the page, from Chromium's log."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _mark(dom: str) -> dict[str, str]:
    tag = re.search(r"<div id=\"audit-check\"[^>]*>", dom)
    assert tag, "the check script's marker is missing from the DOM"
    return dict(re.findall(r"data-([a-z]+)=\"([^\"]*)\"", tag.group(0)))


def test_report_renders_in_headless_chromium(tmp_path):
    _chromium()
    root = write_fixture(tmp_path / "run")
    out = tmp_path / "report"
    write_audit(root, DATASET, Params(), out)
    page = out / "audit.html"
    n_images = len(list((out / "figures").glob("*.png")))
    dom = _browse(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == []
    mark = _mark(dom.stdout)
    assert mark["status"] == "ok" and mark["broken"] == "0" and int(mark["images"]) == n_images >= 8
    assert int(mark["tables"]) >= 10
    for anchor in ("validity", "cost", "plausibility", "immutable", "queries", "certification", "subgroups",
                   "evaluate", "provenance"):
        assert f"<section id=\"{anchor}\">" in dom.stdout
    shot = tmp_path / "audit.png"
    png = _browse(page, f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars")
    assert png.returncode == 0 and _console(png.stderr) == []
    from PIL import Image

    with Image.open(shot) as im:
        assert im.size == (1200, 2400)
        assert np.unique(np.asarray(im.convert("L").resize((60, 120)))).size > 20  # not a blank page


def test_browser_check_catches_a_broken_image(tmp_path):
    _chromium()
    page = tmp_path / "bad.html"
    page.write_text(render_html("T", [], []).replace(
        "<div id=\"audit-check\"", "<img alt=\"missing\" src=\"data:image/png;base64,AAAA\"><div id=\"audit-check\""))
    dom = _browse(page, "--dump-dom")
    assert _mark(dom.stdout)["broken"] == "1"
    assert any("audit image not loaded: missing" in line for line in _console(dom.stderr))
