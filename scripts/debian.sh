# shellcheck shell=bash
# Shared by scripts/bootstrap and scripts/controller (sourced; each defines `say`).

# Install those of the Debian packages named that are missing.
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
}

# Link the Python modules of Debian packages (bindings built for Debian's python3,
# not on PyPI) into a venv's site-packages, with their metadata so that pip and
# importlib see their versions, and nothing else of Debian's dist-packages:
#   link_debian_modules VENV_PYTHON PACKAGE...
link_debian_modules() {
  local site pkg path
  site=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  shift
  for pkg in "$@"; do
    dpkg -L "$pkg" | grep -E '^/usr/lib/python3/dist-packages/[^/]+$' | while read -r path; do
      ln -sfn "$path" "$site/"
    done
  done
}
