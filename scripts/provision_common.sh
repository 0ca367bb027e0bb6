# Shared settings for the real-server provisioning scripts (sourced, not run).
#
# Everything heavy lives under one cache root, keyed by version (and models by a hash of their
# generator), so a second provisioning run on the same machine only checks that the artefacts are there.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Test-only support (server fixtures, model generators, pinned versions); not part of the package.
TESTING_DIR="$REPO_ROOT/tests/support"
# shellcheck source=../tests/support/versions.env
source "$TESTING_DIR/versions.env"
PLATEAU_CACHE="${PLATEAU_CACHE:-$HOME/.cache/plateau-bench}"
PLATEAU_LOG_DIR="$PLATEAU_CACHE/logs"
mkdir -p "$PLATEAU_CACHE" "$PLATEAU_LOG_DIR"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Models are keyed by their generator's content: editing a generator regenerates, nothing else does.
# Must match tests/support/real_servers.py's model_key.
model_key() { sha256sum "$1" | cut -c1-12; }

# apt-get update costs tens of seconds, so it runs only when a package is actually missing, and at most
# once per provisioning run (scripts running in parallel share the stamp named by PLATEAU_APT_STAMP).
ensure_debian_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local stamp="${PLATEAU_APT_STAMP:-}"
  (
    flock 9
    if [ -z "$stamp" ] || [ ! -e "$stamp" ]; then
      DEBIAN_FRONTEND=noninteractive apt-get update -q
      [ -n "$stamp" ] && touch "$stamp"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  ) 9>"$PLATEAU_CACHE/.apt.lock"
}
