#!/bin/sh
# Run one DVC stage (`sh stages/run.sh <stage> [args]` = `python -m stages.<stage> [args]`) with an
# interpreter that has recourselab installed, so that plain `dvc repro` works from any shell:
#   1. $RECOURSELAB_PYTHON (set by `recourselab repro`: the interpreter running it);
#   2. `python` or `python3` on PATH (an activated virtual environment);
#   3. the project's .venv/bin/python (made by `make setup`);
# else it exits 1 with a one-line message saying what to do. POSIX sh, no external commands.
case "$0" in
    */*) here=${0%/*} ;;
    *) here=. ;;
esac
root=$(cd "$here/.." && pwd) || exit 1
if [ $# -eq 0 ]; then
    echo "usage: sh stages/run.sh STAGE [ARGS...]" >&2
    exit 2
fi
stage=$1
shift
if [ ! -f "$root/stages/$stage.py" ]; then
    echo "recourselab: no stage script stages/$stage.py in $root" >&2
    exit 2
fi

has_recourselab() {
    [ -n "$1" ] && command -v "$1" >/dev/null 2>&1 && "$1" -c "import recourselab" >/dev/null 2>&1
}

py=
for candidate in "${RECOURSELAB_PYTHON:-}" python python3 "$root/.venv/bin/python"; do
    if has_recourselab "$candidate"; then
        py=$candidate
        break
    fi
done
if [ -z "$py" ]; then
    echo "recourselab stage $stage: no Python with recourselab found (tried python, python3 and" \
         "$root/.venv/bin/python): run \`make setup\` once, then \`source .venv/bin/activate\`" \
         "before \`dvc repro\`, or run \`make repro\`" >&2
    exit 1
fi
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
exec "$py" -m "stages.$stage" "$@"
