"""Typed params: validation messages, profiles, dump/parse round trip, drift of params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from recourselab.config import (
    DEFAULT_DATASETS,
    Params,
    available_profiles,
    dump_params,
    load_params,
    parse_params,
    render_profile,
    section_hash,
    write_params,
)
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.errors import ConfigError
from recourselab.pipeline.validate import validate_params

REPO_ROOT = Path(__file__).resolve().parents[1]

def checked(raw):
    """``raw`` parsed and checked against the registries, as a stage loads its params."""
    return validate_params(parse_params(raw))


CUSTOM_OK = {"path": "mine.csv", "target": "label", "favourable": 1}


# ---------------------------------------------------------------------------- defaults
def test_defaults_match_design():
    p = Params()
    assert p.profile == "default"
    assert p.seeds == [0, 1, 2]
    assert p.datasets == DEFAULT_DATASETS
    assert p.prepare.split == (0.6, 0.2, 0.2)
    assert p.prepare.n_synthetic == 3000
    assert p.prepare.chessboard_std == 0.05
    assert p.prepare.max_rows is None
    assert p.data.dir is None and p.data.cache_dir is None and p.data.custom == {}


def test_parse_none_and_empty_give_defaults():
    assert parse_params(None) == Params()
    assert parse_params({}) == Params()


def test_params_are_frozen():
    p = Params()
    with pytest.raises(ValidationError, match="frozen"):
        p.seeds = [5]  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        p.prepare.n_synthetic = 10  # type: ignore[misc]


# ---------------------------------------------------------------------------- unknown keys
def test_typo_in_section_names_key_suggests_and_lists_valid_keys():
    with pytest.raises(ConfigError) as info:
        parse_params({"prepare": {"splt": [0.6, 0.2, 0.2]}})
    msg = str(info.value)
    assert "'prepare.splt'" in msg
    assert "section 'prepare'" in msg
    assert "did you mean 'split'?" in msg
    assert "valid keys: split, n_synthetic, data_seed, chessboard_std, max_rows" in msg


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match=r"unknown key 'sedes' in section '<top level>' "
                                          r"\(did you mean 'seeds'\?\); valid keys: profile, seeds"):
        parse_params({"sedes": [0]})


def test_unknown_key_without_close_match_has_no_suggestion():
    with pytest.raises(ConfigError) as info:
        parse_params({"orchestration": {"zzzzzz": 1}})
    msg = str(info.value)
    assert "unknown key 'orchestration.zzzzzz' in section 'orchestration'" in msg
    assert "did you mean" not in msg
    assert "valid keys: cache_dir, max_workers" in msg


def test_custom_dataset_declaration_typo_names_nested_section():
    raw = {"data": {"custom": {"mine": {"pth": "mine.csv", "target": "label", "favourable": 1}}}}
    with pytest.raises(ConfigError) as info:
        parse_params(raw)
    msg = str(info.value)
    assert "unknown key 'data.custom.mine.pth' in section 'data.custom.mine'" in msg
    assert "did you mean 'path'?" in msg
    assert "valid keys: path, target, favourable, categorical, integer, immutable, monotone, drop, sha256, sep" in msg
    # the required key that the typo hid is reported too
    assert "data.custom.mine.path: Field required" in msg


def test_every_error_is_reported_with_source():
    with pytest.raises(ConfigError) as info:
        parse_params({"sedes": [0], "prepare": {"n_synthetic": 5}}, source="my.yaml")
    msg = str(info.value)
    assert msg.startswith("invalid parameters in my.yaml:")
    assert "'sedes'" in msg
    assert "prepare.n_synthetic" in msg and "greater than or equal to 20" in msg


# ---------------------------------------------------------------------------- datasets
def test_unknown_dataset_lists_valid_and_suggests():
    with pytest.raises(ConfigError) as info:
        checked({"datasets": ["moon"]})
    msg = str(info.value)
    assert "unknown dataset 'moon' (did you mean 'moons'?)" in msg
    assert "valid datasets: " + ", ".join(sorted(BUILTIN_DATASETS)) in msg
    assert "data.custom" in msg


def test_custom_dataset_name_becomes_valid():
    p = parse_params({"datasets": ["mine"], "data": {"custom": {"mine": CUSTOM_OK}}})
    assert p.datasets == ["mine"]
    decl = p.data.custom["mine"]
    assert decl.path == Path("mine.csv")
    assert decl.sep == "," and decl.sha256 is None and decl.categorical == []


def test_unknown_dataset_lists_custom_names_too():
    with pytest.raises(ConfigError, match=r"valid datasets: .*spirals, mine"):
        checked({"datasets": ["nope"], "data": {"custom": {"mine": CUSTOM_OK}}})


def test_custom_may_not_reuse_builtin_name():
    with pytest.raises(ConfigError, match=r"custom datasets may not reuse built-in names: \['adult'\]"):
        checked({"data": {"custom": {"adult": CUSTOM_OK}}})


def test_dataset_listed_twice():
    with pytest.raises(ConfigError, match=r"datasets listed twice: \['moons', 'moons'\]"):
        parse_params({"datasets": ["moons", "moons"]})


def test_custom_declaration_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"data\.custom\.mine: Input should be a valid dictionary"):
        parse_params({"data": {"custom": {"mine": 5}}})


def test_yaml_types_that_are_not_coercions_still_fill_their_fields():
    p = parse_params({"train_flow": {"lambda_cost": 1}, "prepare": {"split": [0.6, 0.2, 0.2]},
                      "data": {"dir": "somewhere"}})
    assert p.train_flow.lambda_cost == 1.0 and isinstance(p.train_flow.lambda_cost, float)
    assert p.prepare.split == (0.6, 0.2, 0.2)
    assert p.data.dir == Path("somewhere")


def test_custom_favourable_keeps_yaml_type():
    as_str = parse_params({"data": {"custom": {"mine": {**CUSTOM_OK, "favourable": "1"}}}})
    as_int = parse_params({"data": {"custom": {"mine": {**CUSTOM_OK, "favourable": 1}}}})
    assert as_str.data.custom["mine"].favourable == "1"
    assert as_int.data.custom["mine"].favourable == 1
    assert isinstance(as_int.data.custom["mine"].favourable, int)


# ---------------------------------------------------------------------------- values and types
@pytest.mark.parametrize(
    ("raw", "pattern"),
    [
        ({"seeds": "abc"}, r"seeds: Input should be a valid list"),
        ({"seeds": []}, r"seeds: .*at least one seed is required"),
        ({"seeds": [1, 1]}, r"seeds: .*distinct integers from 0 to 4294967294, got \[1, 1\]"),
        ({"seeds": [-1]}, r"seeds: .*distinct integers from 0 to 4294967294, got \[-1\]"),
        ({"prepare": {"n_synthetic": "many"}}, r"prepare\.n_synthetic: Input should be a valid integer"),
        ({"prepare": {"n_synthetic": 10}}, r"prepare\.n_synthetic: .*greater than or equal to 20"),
        ({"prepare": {"chessboard_std": 0}}, r"prepare\.chessboard_std: .*greater than 0"),
        ({"prepare": {"max_rows": 10}}, r"prepare\.max_rows: .*greater than or equal to 50"),
        ({"prepare": {"data_seed": -3}}, r"prepare\.data_seed: .*greater than or equal to 0"),
        ({"orchestration": {"max_workers": 0}}, r"orchestration\.max_workers: .*greater than or equal to 1"),
        ({"datasets": "moons"}, r"datasets: Input should be a valid list"),
        ({"data": {"custom": {"mine": {**CUSTOM_OK, "categorical": "a"}}}},
         r"data\.custom\.mine\.categorical: Input should be a valid list"),
        # no lax coercions: a YAML boolean is not a number, a string not a boolean, 2.5 not an integer
        ({"distill": {"budget": True}}, r"distill\.budget: Input should be a valid integer"),
        ({"train_flow": {"lambda_cost": True}}, r"train_flow\.lambda_cost: Input should be a valid number"),
        ({"train_flow": {"adjoint": "yes"}}, r"train_flow\.adjoint: Input should be a valid boolean"),
        ({"train_flow": {"epochs": 2.5}}, r"train_flow\.epochs: Input should be a valid integer"),
        ({"seeds": ["0"]}, r"seeds\.0: Input should be a valid integer"),
    ],
)
def test_wrong_types_and_values_name_the_key(raw, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_params(raw)


@pytest.mark.parametrize(
    "split",
    [[0.5, 0.2, 0.2], [0.6, 0.3, 0.2], [0.8, 0.2, 0.0], [1.2, -0.1, -0.1]],
)
def test_split_must_be_positive_and_sum_to_one(split):
    with pytest.raises(ConfigError, match=r"prepare\.split: .*positive and sum to 1"):
        parse_params({"prepare": {"split": split}})


def test_split_needs_three_fractions():
    with pytest.raises(ConfigError, match=r"prepare\.split\.2: Field required"):
        parse_params({"prepare": {"split": [0.6, 0.4]}})


def test_valid_split_is_accepted_as_tuple():
    p = parse_params({"prepare": {"split": [0.7, 0.15, 0.15]}})
    assert p.prepare.split == (0.7, 0.15, 0.15)


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"x\.yaml must hold a mapping at the top level, got list"):
        parse_params([1, 2], source="x.yaml")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- load_params
def test_load_params_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"params file not found: .*nope\.yaml"):
        load_params(missing)


def test_load_params_invalid_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [0, 1\nprepare: {split: \n")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML"):
        load_params(bad)


@pytest.mark.parametrize(("text", "where"), [
    ("train_flow: {epochs: 5}\nseeds: [0]\ntrain_flow: {hidden: 8}\n", "key 'train_flow' is given twice in one "
                                                                        r"mapping \(lines 1 and 3\)"),
    ("train_flow:\n  epochs: 5\n  epochs: 6\n", r"key 'epochs' is given twice in one mapping \(lines 2 and 3\)"),
])
def test_load_params_refuses_a_key_given_twice(tmp_path, text, where):
    path = tmp_path / "params.yaml"
    path.write_text(text)  # plain YAML would keep the last one and drop the first silently
    with pytest.raises(ConfigError, match=r"params\.yaml: " + where):
        load_params(path)


def test_load_params_names_a_file_that_is_not_text(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_bytes(b"\xffseeds: [0]\n")
    with pytest.raises(ConfigError, match=r"params\.yaml is not UTF-8 text"):
        load_params(path)


@pytest.mark.parametrize(("text", "message"), [
    ("train_flow: {epochs: [1\n", r"broken\.yaml is not valid YAML"),
    ("- 1\n- 2\n", r"broken\.yaml must hold a mapping of params sections at the top level, got list"),
    ("seeds: [0]\nseeds: [1]\n", r"broken\.yaml: key 'seeds' is given twice"),
])
def test_a_broken_profile_is_a_config_error_naming_its_file(tmp_path, text, message):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "broken.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        render_profile("broken", tmp_path)


def test_load_params_empty_file_gives_defaults(tmp_path):
    empty = tmp_path / "params.yaml"
    empty.write_text("")
    assert load_params(empty) == Params()


def test_load_params_names_the_file_in_errors(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("prepare:\n  splt: [0.6, 0.2, 0.2]\n")
    with pytest.raises(ConfigError, match=r"invalid parameters in .*params\.yaml:\n.*'prepare\.splt'"):
        load_params(path)


def test_load_params_reads_values(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("seeds: [4, 2]\nprepare:\n  n_synthetic: 500\n")
    p = load_params(path)
    assert p.seeds == [4, 2]
    assert p.prepare.n_synthetic == 500
    assert p.prepare.split == (0.6, 0.2, 0.2)  # untouched keys keep the defaults


# ---------------------------------------------------------------------------- profiles
def test_available_profiles_lists_default_first():
    profiles = available_profiles(REPO_ROOT)
    assert profiles[0] == "default"
    assert {"tiny", "paper"} <= set(profiles)
    assert profiles.count("default") == 1


def test_render_default_profile_is_the_model_defaults():
    assert render_profile("default", REPO_ROOT) == Params()


def test_render_tiny_profile_overlays_defaults():
    tiny = render_profile("tiny", REPO_ROOT)
    overlay = yaml.safe_load((REPO_ROOT / "profiles" / "tiny.yaml").read_text())
    assert tiny.profile == "tiny"
    assert tiny.seeds == overlay["seeds"]
    assert tiny.datasets == overlay["datasets"]
    assert tiny.prepare.n_synthetic == overlay["prepare"]["n_synthetic"]
    # keys that the overlay does not mention keep the defaults (deep merge, not replace)
    assert tiny.prepare.split == Params().prepare.split
    assert tiny.prepare.chessboard_std == Params().prepare.chessboard_std
    assert tiny.orchestration.cache_dir == Params().orchestration.cache_dir


def test_render_unknown_profile(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown profile 'tinny' \(did you mean 'tiny'\?\); "
                                          r"valid: default, paper, tiny"):
        render_profile("tinny", REPO_ROOT)


def test_render_profile_with_typo_names_profile_file(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.yaml").write_text("prepare:\n  splt: [0.6, 0.2, 0.2]\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\n.*'prepare\.splt'.*did you mean 'split'"):
        render_profile("bad", tmp_path)


@pytest.mark.parametrize("name", ["default", "tiny", "paper"])
def test_dump_parse_round_trip(name):
    p = render_profile(name, REPO_ROOT)
    text = dump_params(p)
    assert text.startswith(f"# recourselab parameters, profile {name!r}.\n")
    assert parse_params(yaml.safe_load(text)) == p


def test_dump_keeps_declaration_order():
    text = dump_params(Params())
    keys = [line.split(":")[0] for line in text.splitlines() if line and line[0].isalpha()]
    assert keys == list(Params.model_fields)


def test_params_yaml_is_the_rendered_default_profile():
    """Guards drift between the model defaults and the committed params.yaml."""
    assert (REPO_ROOT / "params.yaml").read_text() == dump_params(render_profile("default", REPO_ROOT))


def test_committed_params_yaml_loads():
    assert load_params(REPO_ROOT / "params.yaml") == Params()


# ---------------------------------------------------------------------------- section_hash
def test_section_hash_is_stable_and_sensitive():
    a = parse_params({"prepare": {"n_synthetic": 300}})
    b = parse_params({"prepare": {"n_synthetic": 300}})
    c = parse_params({"prepare": {"n_synthetic": 301}})
    assert section_hash(a.prepare) == section_hash(b.prepare)
    assert section_hash(a.prepare) != section_hash(c.prepare)
    assert len(section_hash(a.prepare)) == 64
    # plain mappings hash independent of key order
    assert section_hash({"x": 1, "y": 2}) == section_hash({"y": 2, "x": 1})


# ---------------------------------------------------------------------------- per-dataset train_flow
def test_train_flow_per_dataset_overrides_only_that_dataset():
    p = parse_params({"train_flow": {"min_steps": 7, "per_dataset": {"spirals": {"min_steps": 500,
                                                                                 "lambda_cost": 0.3}}}})
    spirals, moons = p.train_flow.for_dataset("spirals"), p.train_flow.for_dataset("moons")
    assert (spirals.min_steps, spirals.lambda_cost) == (500, 0.3)
    assert (moons.min_steps, moons.lambda_cost) == (7, p.train_flow.lambda_cost)
    assert spirals.per_dataset == {} and spirals.epochs == p.train_flow.epochs


@pytest.mark.parametrize(("override", "pattern"), [
    ({"spirals": {"min_stepz": 5}}, r"per_dataset\.spirals: unknown keys \['min_stepz'\] \(did you mean "
                                    r"'min_steps'\?\); valid keys: .*min_steps"),
    ({"spiral": {"min_steps": 5}}, r"unknown dataset 'spiral' \(did you mean 'spirals'\?\)"),
    ({"spirals": {"min_steps": -5}}, r"per_dataset\.spirals: min_steps: Input should be greater than or equal to 0"),
    ({"spirals": {"min_steps": True}}, r"per_dataset\.spirals: min_steps: Input should be a valid integer"),
])
def test_train_flow_per_dataset_errors_name_the_problem(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        checked({"train_flow": {"per_dataset": override}})


# ---------------------------------------------------------------------------- per-dataset discover
def test_discover_per_dataset_replaces_solver_settings_of_that_dataset_only():
    default = parse_params({}).discover
    assert default.solver.actionability == {}  # ages only grow through the schema (prepare.monotone)
    assert default.solver_for("compas").eta_r == 1.0
    assert default.solver_for("german") == default.solver_for("heloc") == default.solver
    p = parse_params({"discover": {"solver": {"step": 0.3}, "per_dataset": {"heloc": {"step_range": "factuals"}}}})
    heloc, compas = p.discover.solver_for("heloc"), p.discover.solver_for("compas")
    assert (heloc.step_range, heloc.step) == ("factuals", 0.3)
    assert (compas.step_range, compas.eta_r) == ("training", default.solver.eta_r)  # a given mapping replaces it


@pytest.mark.parametrize(("override", "pattern"), [
    ({"compas": {"actionabilty": {}}}, r"discover\.per_dataset\.compas: unknown keys \['actionabilty'\] "
                                       r"\(did you mean 'actionability'\?\)"),
    ({"compass": {"step": 0.1}}, r"discover\.per_dataset: unknown dataset 'compass' \(did you mean 'compas'\?\)"),
    ({"compas": {"actionability": {"age": "up"}}}, r"per_dataset\.compas: actionability\.age: Input should be "
                                                   r"'increasing', 'decreasing' or 'fixed'"),
    ({"compas": {"step_range": "global"}}, r"per_dataset\.compas: step_range: Input should be 'training' or "
                                           r"'factuals'"),
])
def test_discover_per_dataset_errors_name_the_problem(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        checked({"discover": {"per_dataset": override}})


@pytest.mark.parametrize(("raw", "line"), [
    ({"discover": {"per_dataset": {"adult": {"eta_l": 0.9, "eta_r": 0.5}}}},
     "  discover.per_dataset.adult: DISCOVER settings: eta_l (0.9) must not exceed eta_r (0.5)"),
    ({"train_flow": {"per_dataset": {"spirals": {"min_steps": -5}}}},
     "  train_flow.per_dataset.spirals: min_steps: Input should be greater than or equal to 0"),
    ({"discover": {"solver": {"eta_l": 0.9, "eta_r": 0.5}}},
     "  discover.solver: DISCOVER settings: eta_l (0.9) must not exceed eta_r (0.5)"),
])
def test_error_lines_name_each_place_once(raw, line):
    """A model-level error inside an override has no location of its own: no empty ': :' place,
    no pydantic 'Value error, ' prefix and no section named twice."""
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    assert str(err.value).splitlines()[1:] == [line]


def test_ablate_settings_are_validated():
    assert parse_params({}).ablate.datasets == ["moons", "adult", "compas"]
    chosen = parse_params({"datasets": ["moons"], "ablate": {"datasets": ["german"], "n_seeds": 2,
                                                             "variants": ["no_distill"]}}).ablate
    assert (chosen.datasets, chosen.n_seeds, chosen.variants) == (["german"], 2, ["no_distill"])


@pytest.mark.parametrize(("ablate", "pattern"), [
    ({"datasets": ["adlt"]}, r"ablate.datasets: unknown dataset 'adlt' \(did you mean 'adult'\?\)"),
    ({"n_seeds": 0}, r"ablate.n_seeds: Input should be greater than or equal to 1"),
    ({"variants": ["no_densty"]}, r"ablate.variants.0: Input should be 'no_distill'"),
    ({"variants": []}, "variants must be a non-empty list"),
    ({"seeds": [0]}, r"unknown key 'ablate.seeds'.*valid keys: datasets, n_seeds, variants"),
    ({"n_seeds": 5}, r"ablate.n_seeds is 5 but only 3 seeds are listed \(\[0, 1, 2\]\)"),
])
def test_ablate_errors_name_the_problem(ablate, pattern):
    with pytest.raises(ConfigError, match=pattern):
        checked({"ablate": ablate})


@pytest.mark.parametrize("grid", [{"lambda_cost": []}, {"lambda_den": [0.1, -0.2]}])
def test_lambda_grid_needs_non_negative_values(grid):
    key = next(iter(grid))
    with pytest.raises(ConfigError, match=rf"train_flow\.lambda_grid\.{key}: needs at least one value, all >= 0"):
        parse_params({"train_flow": {"lambda_grid": grid}})
    assert parse_params({"train_flow": {"lambda_grid": {key: [0.0, 0.3]}}}).train_flow.lambda_grid == {key: [0.0, 0.3]}


@pytest.mark.parametrize(("raw", "where"), [
    ({"train_flow": {"lambda_den": float("inf")}}, "train_flow.lambda_den"),
    ({"generate": {"jitter": float("-inf")}}, "generate.jitter"),
    ({"train_flow": {"lambda_grid": {"lambda_cost": [0.2, float("inf")]}}}, "train_flow.lambda_grid.lambda_cost.1"),
    ({"discover": {"solver": {"step": float("nan")}}}, "discover.solver.step"),
])
def test_infinite_and_nan_numbers_are_refused_where_they_are(raw, where):
    with pytest.raises(ConfigError, match=rf"{where}: Input should be a finite number"):
        parse_params(raw, "params.yaml")


def test_an_empty_dataset_list_is_refused():
    with pytest.raises(ConfigError, match="at least one dataset is required"):
        parse_params({"datasets": []})
    with pytest.raises(ConfigError, match="threads_per_task"):
        parse_params({"orchestration": {"threads_per_task": 0}})


# ---------------------------------------------------------------------------- a custom dataset's contract
def test_custom_dataset_contract_defaults():
    decl = parse_params({"data": {"custom": {"mine": CUSTOM_OK}}}).data.custom["mine"]
    assert (decl.encoding, decl.classes, decl.on_bad_label, decl.bounds) == ("utf-8", None, "error", {})


def test_custom_dataset_contract_values_keep_their_yaml_types():
    decl = parse_params({"data": {"custom": {"mine": {
        **CUSTOM_OK, "classes": [0, 1, 2], "on_bad_label": "drop", "encoding": "latin-1",
        "bounds": {"age": [0, 120], "income": [None, 1e6]}}}}}).data.custom["mine"]
    assert decl.classes == [0, 1, 2] and all(isinstance(c, int) for c in decl.classes)
    assert decl.bounds == {"age": (0.0, 120.0), "income": (None, 1e6)}


@pytest.mark.parametrize(("decl", "pattern"), [
    ({"on_bad_label": "drop"}, r"on_bad_label: drop needs `classes`"),
    ({"on_bad_label": "ignore"}, r"on_bad_label: Input should be 'error' or 'drop'"),
    ({"classes": [0, 2]}, r"classes \[0, 2\] do not include the favourable label 1"),
    ({"classes": [1]}, r"classes: at least two are needed"),
    ({"classes": [0, 1, "0"]}, r"classes: \['0'\] listed twice"),
    ({"bounds": {"age": [120, 0]}}, r"bounds: age: lower bound 120\.0 is above the upper bound 0\.0"),
    ({"bounds": {"age": [None, None]}}, r"bounds: age: give a lower or an upper bound"),
    ({"bounds": {"age": [0]}}, r"bounds\.age\.1: Field required"),
    ({"bounds": {"age": [True, 3]}}, r"bounds\.age\.0: Input should be a valid number"),
    ({"encoding": "utf-9"}, r"encoding: .*unknown text encoding 'utf-9'"),
    ({"sep": ";;"}, r"sep: .*sep must be a single character, got ';;'"),
])
def test_custom_dataset_contract_errors_name_the_key(decl, pattern):
    with pytest.raises(ConfigError, match=r"data\.custom\.mine.*" + pattern):
        parse_params({"data": {"custom": {"mine": {**CUSTOM_OK, **decl}}}})


# ---------------------------------------------------------------------------- a profile switch keeps the user's data
USER = {"datasets": ["moons", "mine"], "seeds": [4],
        "data": {"dir": "/srv/data", "custom": {"mine": {**CUSTOM_OK, "immutable": ["age"]}}},
        "prepare": {"immutable": {"mine": ["sex"], "adult": []},
                    "monotone": {"mine": {"age": "increasing"}, "adult": {"age": None}}}}


@pytest.mark.parametrize("name", ["default", "tiny", "paper"])
def test_a_profile_keeps_the_data_section_and_custom_datasets(name):
    p = render_profile(name, REPO_ROOT, current=USER)
    profile = render_profile(name, REPO_ROOT)
    assert p.profile == name and p.seeds == profile.seeds  # the profile's settings...
    assert p.data.dir == Path("/srv/data") and list(p.data.custom) == ["mine"]  # ...with the user's data
    assert p.datasets == [*profile.datasets, "mine"]
    assert p.prepare.immutable == {**profile.prepare.immutable, "mine": ["sex"]}
    assert p.prepare.monotone == {**profile.prepare.monotone, "mine": {"age": "increasing"}}


def test_a_profile_without_current_params_or_user_data_is_the_profile():
    assert render_profile("tiny", REPO_ROOT, current=None) == render_profile("tiny", REPO_ROOT)
    plain = dump_params(Params()).replace("profile: default", "profile: tiny")
    assert render_profile("tiny", REPO_ROOT, current=yaml.safe_load(plain)) == render_profile("tiny", REPO_ROOT)


@pytest.mark.parametrize(("current", "pattern"), [
    (["a"], r"params\.yaml must hold a mapping at the top level, got list"),
    ({"data": ["x"]}, r"params\.yaml: data must be a mapping, got list"),
    ({"datasets": "mine"}, r"params\.yaml: datasets must be a list, got str"),
    ({"data": {"custom": {"mine": {"path": "m.csv"}}}},
     r"tiny\.yaml with the data section and custom datasets kept from params\.yaml:\n.*target: Field required"),
])
def test_kept_settings_that_are_broken_are_a_config_error(current, pattern):
    with pytest.raises(ConfigError, match=pattern):
        render_profile("tiny", REPO_ROOT, current=current, current_source="params.yaml")


def test_write_params_backs_up_the_file_it_replaces(tmp_path):
    path = tmp_path / "params.yaml"
    assert write_params(path, Params()) is None  # nothing to keep
    first = path.read_bytes()
    assert write_params(path, Params()) is None and not list(tmp_path.glob("*.bak"))  # the same text
    tiny = render_profile("tiny", REPO_ROOT)
    backup = write_params(path, tiny)
    assert backup.parent == tmp_path and backup.name.startswith("params.yaml.") and backup.suffix == ".bak"
    assert backup.read_bytes() == first and load_params(path) == tiny
    again = write_params(path, Params())  # a second switch keeps the first backup
    assert again != backup and backup.read_bytes() == first and load_params(again) == tiny
