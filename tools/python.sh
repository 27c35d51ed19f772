# Sourced by the launchers of the Python tools (tools/metg, tools/weft-gantt).
#
# weft_python NAME MODULE...: sets WEFT_PY to the first interpreter that can import every MODULE, trying
# $WEFT_PYTHON (if set), Debian's /usr/bin/python3 (where scripts/install-deps.sh installs python3-numpy and
# python3-matplotlib), then python3 on PATH (a pyenv or virtualenv one may lack them, or not run at all);
# with none, prints one line and exits 2.
weft_python() {
  _weft_name=$1
  shift
  for WEFT_PY in ${WEFT_PYTHON:+"$WEFT_PYTHON"} /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
    [ -n "$WEFT_PY" ] && [ -x "$WEFT_PY" ] || continue
    if "$WEFT_PY" -c 'import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' "$@" >/dev/null 2>&1; then
      return 0
    fi
  done
  echo "$_weft_name: no Python 3 that can import $* (tried \$WEFT_PYTHON, /usr/bin/python3, python3 on PATH);" \
    "run scripts/install-deps.sh or set WEFT_PYTHON" >&2
  exit 2
}
