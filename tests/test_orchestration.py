"""The staging/publishing half of the Prefect pattern (no Prefect needed)."""

from __future__ import annotations

import pytest

from recourselab.orchestration import code_fingerprint, limit_threads, manifest_intact, publish, stage_artifacts


def test_stage_is_content_addressed_and_publish_copies(tmp_path):
    writers = {"a.txt": lambda p: p.write_text("alpha"), "b.txt": lambda p: p.write_text("beta")}
    m1 = stage_artifacts(tmp_path / "stage", writers)
    m2 = stage_artifacts(tmp_path / "stage", writers)
    assert m1 == m2
    assert [p.name for p in (tmp_path / "stage").iterdir()] == [m1["dir"].rsplit("/", 1)[1]]
    assert manifest_intact(m1)
    publish(m1, tmp_path / "out")
    assert (tmp_path / "out" / "b.txt").read_text() == "beta"
    (tmp_path / "stage" / m1["dir"].rsplit("/", 1)[1] / "a.txt").write_text("tampered")
    assert not manifest_intact(m1)


def test_failing_writer_leaves_no_staging_dir(tmp_path):
    def boom(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        stage_artifacts(tmp_path / "stage", {"x": boom})
    assert list((tmp_path / "stage").iterdir()) == []


def test_code_fingerprint_changes_with_modules():
    a = code_fingerprint("recourselab.data")
    assert a == code_fingerprint("recourselab.data")
    assert a != code_fingerprint("recourselab.data", "recourselab.io")


def test_a_damaged_staging_folder_is_replaced_by_the_fresh_write(tmp_path):
    writers = {"a.txt": lambda p: p.write_text("alpha"), "b.txt": lambda p: p.write_text("beta")}
    m1 = stage_artifacts(tmp_path / "stage", writers)
    staged = tmp_path / "stage" / m1["dir"].rsplit("/", 1)[1]
    (staged / "a.txt").unlink()
    (staged / "b.txt").write_text("tampered")
    m2 = stage_artifacts(tmp_path / "stage", writers)
    assert m2 == m1 and manifest_intact(m2)  # same content address, repaired in place
    publish(m2, tmp_path / "out")
    assert (tmp_path / "out" / "a.txt").read_text() == "alpha" and (tmp_path / "out" / "b.txt").read_text() == "beta"


def test_code_fingerprint_covers_flow_modules_outside_the_package():
    import flows.densityflow as fd

    assert "flows.densityflow" in fd.CODE and "recourselab.config" in fd.CODE
    assert code_fingerprint("flows.densityflow") != code_fingerprint("flows.discover")


def test_limit_threads_is_restored_only_when_the_last_concurrent_task_leaves():
    import threading

    import torch

    before = torch.get_num_threads()
    cap = 1 if before > 1 else 2
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def first() -> None:
        with limit_threads(cap):
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with limit_threads(cap):
            second_in.set()
            first_out.wait(10)
            seen["after_first_left"] = torch.get_num_threads()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen["after_first_left"] == cap  # the first task's exit did not lift the second's cap
    assert torch.get_num_threads() == before  # the last exit restored the process's setting
