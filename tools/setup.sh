#!/bin/sh
# One-time set-up of a fresh Debian 12 machine for rig-conform, idempotent.
# Installs the Debian packages the build and tests need, and makes sure an
# OCaml >= 5.1 exists: the one on PATH if it is recent enough, otherwise
# OCaml 5.3.0 built once from the npm registry's source into a cache outside
# the checkout (RIG_OCAML_CACHE, default ~/.cache/rig-conform) and reused.
# Prints, as its last line, the bin directory of the OCaml to use.
set -eu

cache="${RIG_OCAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rig-conform}"
prefix="$cache/ocaml-5.3.0"
log() { printf 'setup: %s\n' "$*" >&2; }

if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
apt_install() { # the Debian packages of "$@" that are not installed yet
  need_pkgs=""
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs="$need_pkgs $p"
  done
  [ -n "$need_pkgs" ] || return 0
  log "installing Debian packages:$need_pkgs"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need_pkgs >&2
}
apt_install ocaml-dune python3-pytest python3-pytest-xdist python3-hypothesis clang libclang-rt-14-dev make gcc

ocaml_ok() { # $1: an ocamlfind-free ocamlc; true when it is >= 5.1
  v=$("$1" -version 2>/dev/null) || return 1
  major=${v%%.*}; rest=${v#*.}; minor=${rest%%.*}
  [ "$major" -gt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -ge 1 ]; }
}

if command -v ocamlc >/dev/null 2>&1 && ocaml_ok "$(command -v ocamlc)"; then
  dirname "$(command -v ocamlc)"
  exit 0
fi
if [ -x "$prefix/bin/ocamlc" ] && ocaml_ok "$prefix/bin/ocamlc"; then
  echo "$prefix/bin"
  exit 0
fi

log "building OCaml 5.3.0 into $prefix (once; about 5 minutes)"
# npm fetches the source from the npm registry; Debian's own npm will do.
command -v npm >/dev/null 2>&1 || apt_install npm
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
( cd "$work" && npm pack --silent ocaml@5.3.0 >/dev/null && tar xzf ocaml-5.3.0.tgz )
src="$work/package"
( cd "$src" && ./configure --prefix="$prefix" >"$work/configure.log" 2>&1 \
    || { tail -30 "$work/configure.log" >&2; exit 1; }
  make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
  make install >"$work/install.log" 2>&1 || { tail -40 "$work/install.log" >&2; exit 1; } )
ocaml_ok "$prefix/bin/ocamlc" || { log "built OCaml does not answer -version"; exit 1; }
echo "$prefix/bin"
