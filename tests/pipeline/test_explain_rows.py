"""``read_rows``: the CSV of ``recourselab explain`` is read as text, and a malformed shape is refused."""

from __future__ import annotations

import io

import pytest

from recourselab.errors import DataError
from recourselab.pipeline.explain_rows import read_rows


def test_rows_keep_their_line_numbers_and_blank_lines():
    frame = read_rows(io.StringIO("age, income\n30,5000\n\n40,6000\n"))
    assert list(frame.columns) == ["age", "income"]
    assert list(frame.index) == [1, 2, 3]
    assert frame.loc[1].tolist() == ["30", "5000"]
    assert frame.loc[2].tolist() == ["", ""]
    assert frame.loc[3].tolist() == ["40", "6000"]


@pytest.mark.parametrize("text", ["age,income\n30,5000,1\n40,6000,2\n",   # pandas would take column 1 as index
                                  "age,income\n30,5000,\n40,6000\n"])      # a trailing comma
def test_a_line_with_more_fields_than_the_header_is_refused_by_line(text):
    with pytest.raises(DataError, match=r"line 2: 3 fields, but the header names 2 columns"):
        read_rows(io.StringIO(text))


def test_a_column_named_twice_is_refused():
    with pytest.raises(DataError, match="'age' more than once"):
        read_rows(io.StringIO("age ,age\n1,2\n"))


def test_quoted_commas_and_short_lines_are_read():
    frame = read_rows(io.StringIO('age,job\n30,"a, b"\n40\n'))
    assert frame["job"].tolist() == ["a, b", ""]


def _file(tmp, name, data: bytes):
    (tmp / name).write_bytes(data)
    return tmp / name


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "missing.csv", "not found"),
    (lambda tmp: tmp, "cannot read the input"),
    (lambda tmp: _file(tmp, "x.csv", b"\xff\xfe\x00bin"), "not UTF-8"),
    (lambda tmp: _file(tmp, "e.csv", b""), "is empty"),
    (lambda tmp: _file(tmp, "h.csv", b"age\n"), "no rows"),
])
def test_unreadable_inputs_name_the_problem(tmp_path, make, message):
    with pytest.raises(DataError, match=message):
        read_rows(make(tmp_path))
