#!/usr/bin/env bash
# Test the image's install steps without Docker: run the Dockerfile's install script
# (scripts/install.sh, same constraints.txt) in a fresh virtual environment with torch's CPU
# build, then check the result the way the image is used: through entrypoint.py.
#
#   scripts/test-image-install.sh
#
# TORCH_INDEX_URL as for install.sh (default: PyTorch's CPU index). The project's own machines
# reach only PyPI and serve torch's CPU wheel from their wheelhouse: there, set it empty.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
"$python" -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --disable-pip-version-check --upgrade pip

started=$SECONDS
TORCH_VARIANT=cpu PYTHON="$venv/bin/python" bash "$root/scripts/install.sh" "$root" \
  >"$venv/install.log" 2>&1 || {
  cat "$venv/install.log" >&2
  echo "test-image-install: scripts/install.sh failed" >&2
  exit 1
}
echo "test-image-install: installed in $((SECONDS - started)) s"
python -m pip check

# Every pinned package got its pinned version: a constraint pip could not honour fails here.
python - "$root/constraints.txt" <<'EOF'
import importlib.metadata as metadata
import sys

wrong = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        found = metadata.version(name)
    except metadata.PackageNotFoundError:
        continue  # constraints pin only what is asked for
    if found.split("+")[0] != version:
        wrong.append(f"{name}: pinned {version}, installed {found}")
print("\n".join(wrong) or "test-image-install: every installed package has its pinned version")
sys.exit(1 if wrong else 0)
EOF

# As the image runs it: entrypoint.py passes its arguments to the CLI, from outside the checkout
# so that the installed package, not the source tree, is what runs.
cd "$venv"
python "$root/entrypoint.py" --version
python "$root/entrypoint.py" run "$root/examples/parity.yaml" --select 'golden-head*' \
  --json "$venv/report.json"
python - "$venv/report.json" <<'EOF'
import json
import sys

summary = json.load(open(sys.argv[1], encoding="utf-8"))["summary"]
assert summary == {"passed": 1, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0}, summary
print("test-image-install: the installed package checks the example's golden-head case")
EOF
