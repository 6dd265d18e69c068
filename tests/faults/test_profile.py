"""`recourselab profile NAME` keeps the user's data, backs up what it replaces, and leaves an
unreadable params file alone."""

from __future__ import annotations

from pathlib import Path

import yaml

from recourselab import cli
from recourselab.config import load_params, render_profile

REPO_ROOT = Path(__file__).resolve().parents[2]

USER_PARAMS = """\
datasets: [moons, credit]
data:
  dir: /srv/recourse-data
  custom:
    credit: {path: credit.csv, target: risk, favourable: good, categorical: [city], encoding: latin-1,
             bounds: {age: [0, 120]}}
prepare:
  immutable: {credit: [age]}
"""


def test_profile_keeps_custom_datasets_and_writes_a_backup(monkeypatch, tmp_path, caplog):
    monkeypatch.chdir(REPO_ROOT)
    target = tmp_path / "params.yaml"
    target.write_text(USER_PARAMS)
    with caplog.at_level("INFO"):
        assert cli.main(["profile", "tiny", "--params", str(target)]) == 0
    params = load_params(target)
    assert params.profile == "tiny" and params.datasets == ["moons", "credit"]
    assert params.data.dir == Path("/srv/recourse-data")
    credit = params.data.custom["credit"]
    assert credit.encoding == "latin-1" and credit.bounds == {"age": (0.0, 120.0)}
    assert params.prepare.immutable["credit"] == ["age"]
    assert params.models == render_profile("tiny", REPO_ROOT).models
    (backup,) = tmp_path.glob("params.yaml.*.bak")
    assert backup.read_text() == USER_PARAMS and str(backup) in caplog.text
    assert "custom datasets: credit" in caplog.text


def test_profile_refuses_to_replace_a_file_it_cannot_read(monkeypatch, tmp_path, caplog):
    monkeypatch.chdir(REPO_ROOT)
    target = tmp_path / "params.yaml"
    broken = USER_PARAMS + "  oops: [\n"
    target.write_text(broken)
    assert cli.main(["profile", "tiny", "--params", str(target)]) == 1
    assert target.read_text() == broken and not list(tmp_path.glob("*.bak"))
    assert "is not valid YAML" in caplog.text and "move it away to write the profile from scratch" in caplog.text
    target.unlink()  # moved away: the profile is written from scratch
    assert cli.main(["profile", "tiny", "--params", str(target)]) == 0
    assert yaml.safe_load(target.read_text())["data"]["custom"] == {} and not list(tmp_path.glob("*.bak"))
