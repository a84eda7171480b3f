#!/usr/bin/env bash
# rocm-toolchain.sh: a compile-only ROCm toolchain from Debian's packages, in a chroot.
#
# Provisions one Debian minbase chroot (sid base, ROCm 7.2.4 + clang-22 from
# experimental) that compiles MLX's ROCm backend for gfx targets on a CPU-only
# host. Nothing from sid is installed on the host; the host only needs debootstrap.
# See docs/toolchain.md for the measured cost and the quirks handled here.
#
# Usage
#   tools/rocm-toolchain.sh [provision] [--root DIR] [--mirror URL] [--install-host-deps]
#       Create or complete the toolchain (idempotent: with everything present it
#       checks, changes nothing and finishes in seconds, without the network).
#   tools/rocm-toolchain.sh exec [--root DIR] [--bind DIR[:INSIDE]]... [--cwd DIR]
#                                [--env NAME=VALUE]... -- CMD [ARG...]
#       Run CMD inside the chroot. Each --bind DIR is bind-mounted at the same
#       path inside the chroot (or at INSIDE), so paths in compile_commands.json
#       and in compiler messages are the host's paths. Mounts live in a private
#       mount namespace (unshare -m) and vanish when CMD exits, even on failure.
#       The working directory is --cwd, else $PWD when it lies inside a bound
#       directory, else /. The environment is clean (HOME=/root, a standard
#       PATH, LANG=C.UTF-8) plus CCACHE_*, SCCACHE_* and the AWS_ACCESS_KEY_ID,
#       AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN credentials (sccache's S3 storage)
#       from the caller, and each --env.
#       The exit status is CMD's.
#   tools/rocm-toolchain.sh env [--root DIR]
#       Print the path of <root>/toolchain.env (exit 9 when not provisioned).
#   tools/rocm-toolchain.sh verify [--root DIR]
#       Compile a tiny HIP program (gfx1030) inside the chroot.
#
# Default root: ${OVERLAY_TOOLCHAIN_DIR:-$HOME/.cache/overlay/rocm-toolchain}
#
# Files under the root
#   chroot/          the Debian chroot (about 3 GB)
#   versions.txt     `dpkg-query -W` of the chroot: every installed package and version
#   toolchain.env    KEY=VALUE (shell-quoted) facts a build needs; see below
#   cmake-args.txt   the CMake arguments that carry the quirks, one per line
#   READY            written last; its absence means "not (fully) provisioned"
#
# toolchain.env keys (paths named *_IN_CHROOT are valid inside the chroot only):
#   OVERLAY_TOOLCHAIN_ROOT, OVERLAY_TOOLCHAIN_CHROOT, OVERLAY_TOOLCHAIN_SCRIPT,
#   OVERLAY_TOOLCHAIN_EXEC (prefix to run a command: append --bind ... -- CMD),
#   OVERLAY_HIPCC_IN_CHROOT, OVERLAY_JSON_SOURCE_DIR_IN_CHROOT,
#   OVERLAY_CMAKE_ARGS (shell words: bash `eval "a=($OVERLAY_CMAKE_ARGS)"`,
#   Python shlex.split), OVERLAY_ROCM_ARCH_DEFAULT, OVERLAY_ROCM_VERSION.
#
# Quirks carried (docs/toolchain.md):
#   1. GCC 16 <format> vs HIP's `#define __noinline__`: -DCMAKE_CXX_FLAGS=-include format
#   2. the fork passes -parallel-jobs=N, accepted only by AMD's own LLVM: the chroot's
#      /usr/local/bin/hipcc wrapper drops it (and puts ccache in front when present);
#      CMake is pointed at it with -DCMAKE_HIP_COMPILER.
#   3. rocWMMA (needed by the fork only for gfx11*/gfx12*/gfx908/gfx90a/gfx942) is not
#      usable from Debian: compile-check with gfx1030 or gfx906, which need none.
#
# Exit codes
#   0 ok   2 usage   3 not root   4 debootstrap missing   5 mirror unreachable or
#   unknown   6 debootstrap failed   7 apt in the chroot failed   8 toolchain check
#   failed   9 not provisioned (exec/env/verify)   10 another provisioning holds the lock
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
PROG=rocm-toolchain
DEFAULT_ROOT="${OVERLAY_TOOLCHAIN_DIR:-${HOME:-/root}/.cache/overlay/rocm-toolchain}"

BASE_SUITE=sid
ROCM_SUITE=experimental
# sccache: the compiler cache whose shared storage (S3, Redis, GCS, ...) lets CI machines
# share objects (overlay build --cache sccache); ccache is the default.
BASE_PKGS=(cmake ninja-build g++ git ccache sccache liblapacke-dev libopenblas-dev
           nlohmann-json3-dev libfmt-dev)
ROCM_PKGS=(hipcc libamdhip64-dev librocblas-dev libhipblas-dev libhipblaslt-dev
           rocm-cmake librocthrust-dev librocprim-dev libhiprand-dev librocrand-dev)

HIPCC_WRAPPER=/usr/local/bin/hipcc
JSON_DIR=/opt/overlay/nlohmann-json
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { local code=$1; shift; say "error: $*"; exit "$code"; }

# ---------------------------------------------------------------- helpers

# write_if_changed FILE MODE: stdin -> FILE, only when the content differs.
# Sets CHANGED=1 when it wrote.
write_if_changed() {
  local file=$1 mode=$2 tmp
  tmp=$(mktemp "${file}.tmp.XXXXXX")
  cat >"$tmp"
  if [[ -f $file ]] && cmp -s "$tmp" "$file"; then
    rm -f "$tmp"
  else
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$file"
    CHANGED=1
  fi
}

# The host's Debian mirror, read from /etc/apt/sources.list(.d) at run time.
host_mirror() {
  local f line uri
  local -a uris=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    while read -r line; do
      line=${line%%#*}
      [[ $line =~ ^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+) ]] || continue
      uris+=("${BASH_REMATCH[2]}")
    done <"$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    while read -r line; do
      [[ $line =~ ^URIs:[[:space:]]*(.*)$ ]] || continue
      for uri in ${BASH_REMATCH[1]}; do uris+=("$uri"); done
    done <"$f"
  done
  # prefer a URI whose path ends in /debian (not debian-security, not a third party)
  for uri in "${uris[@]}"; do
    if [[ ${uri%/} =~ /debian$ ]]; then printf '%s\n' "${uri%/}"; return 0; fi
  done
  return 1
}

mirror_reachable() {
  local url="$1/dists/$BASE_SUITE/Release"
  if command -v curl >/dev/null; then
    curl -fsS -m 20 -o /dev/null "$url" 2>/dev/null
  elif command -v wget >/dev/null; then
    wget -q -T 20 -O /dev/null "$url"
  else
    command -v python3 >/dev/null || return 0   # cannot check; let apt tell
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20)' "$url" 2>/dev/null
  fi
}

need_root() {
  [[ $(id -u) == 0 ]] || die 3 "must run as root (debootstrap, chroot and mount need it): sudo $0 $*"
}

# Any mount below DIR? (used to refuse deleting a chroot with live mounts)
mounts_below() {
  awk -v d="$1/" 'index($2"/", d) == 1 { found = 1 } END { exit !found }' /proc/self/mounts
}

# ------------------------------------------------------- exec (namespaced chroot)

# __inner: runs inside `unshare -m`; mounts, then chroots. Args:
#   CHROOT CWD NBINDS (HOST INSIDE)xNBINDS NENV (NAME=VALUE)xNENV -- CMD...
inner_exec() {
  local ch=$1 cwd=$2 n=$3; shift 3
  local host inside i
  mount --make-rprivate / 2>/dev/null || true
  mountpoint -q "$ch/proc" || mount -t proc proc "$ch/proc"
  mount --rbind /dev "$ch/dev"
  if [[ -f /etc/resolv.conf && -f $ch/etc/resolv.conf ]]; then
    mount --bind /etc/resolv.conf "$ch/etc/resolv.conf" 2>/dev/null || true
  fi
  for ((i = 0; i < n; i++)); do
    host=$1 inside=$2; shift 2
    mkdir -p "$ch$inside"
    mount --bind "$host" "$ch$inside"
  done
  local ne=$1; shift
  local -a envs=(HOME=/root "PATH=$CHROOT_PATH" LANG=C.UTF-8 "TERM=${TERM:-dumb}")
  for ((i = 0; i < ne; i++)); do envs+=("$1"); shift; done
  [[ $1 == -- ]] && shift
  exec chroot "$ch" /usr/bin/env -i "${envs[@]}" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$cwd" "$@"
}

# run_in_chroot CHROOT CWD "binds..." -- CMD: helper for provisioning (no binds).
run_in_chroot() {
  local ch=$1; shift
  local -a envs=(DEBIAN_FRONTEND=noninteractive)
  local v
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n ${!v:-} ]] && envs+=("$v=${!v}")
  done
  unshare --mount --propagation private -- "$SELF" __inner "$ch" / 0 "${#envs[@]}" "${envs[@]}" -- "$@"
}

cmd_exec() {
  local root=$DEFAULT_ROOT cwd=
  local -a binds=() envs=()
  while (($#)); do
    case $1 in
      --root) root=${2:?--root needs a directory}; shift 2 ;;
      --root=*) root=${1#*=}; shift ;;
      --bind) binds+=("${2:?--bind needs a directory}"); shift 2 ;;
      --bind=*) binds+=("${1#*=}"); shift ;;
      --cwd) cwd=${2:?--cwd needs a directory}; shift 2 ;;
      --cwd=*) cwd=${1#*=}; shift ;;
      --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
      --env=*) envs+=("${1#*=}"); shift ;;
      --) shift; break ;;
      *) die 2 "exec: unknown option '$1' (usage: exec [--root DIR] [--bind DIR[:INSIDE]]... [--cwd DIR] [--env N=V]... -- CMD...)" ;;
    esac
  done
  (($#)) || die 2 "exec: no command given (put it after --)"
  need_root exec
  root=$(readlink -m "$root")
  local ch=$root/chroot
  [[ -f $root/READY ]] || die 9 "no toolchain at $root (run: $SELF --root $root)"
  local -a pairs=()
  local b host inside
  for b in "${binds[@]}"; do
    if [[ $b == *:* ]]; then host=${b%%:*} inside=${b#*:}; else host=$b inside=; fi
    [[ -d $host ]] || die 2 "exec: --bind: no such directory: $host"
    host=$(readlink -f "$host")
    [[ -n $inside ]] || inside=$host
    [[ $inside == /* ]] || die 2 "exec: --bind: inside path must be absolute: $inside"
    case $inside in /|/proc|/proc/*|/dev|/dev/*|/usr|/usr/*|/etc|/etc/*|/bin|/lib|/lib64|/sbin)
      die 2 "exec: refusing to bind over the chroot's $inside" ;;
    esac
    pairs+=("$host" "$inside")
  done
  if [[ -z $cwd ]]; then
    cwd=/
    local here i
    here=$(pwd -P)
    for ((i = 0; i < ${#pairs[@]}; i += 2)); do
      if [[ $here == "${pairs[i]}" || $here == "${pairs[i]}"/* ]]; then
        cwd=${pairs[i+1]}${here#"${pairs[i]}"}; break
      fi
    done
  fi
  local v
  while IFS= read -r v; do envs+=("$v"); done < <(env | grep -E '^(S?CCACHE_[A-Z0-9_]+|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN)=' || true)
  exec unshare --mount --propagation private -- "$SELF" __inner "$ch" "$cwd" \
    $((${#pairs[@]} / 2)) "${pairs[@]}" "${#envs[@]}" "${envs[@]}" -- "$@"
}

# ------------------------------------------------------------------ provision

hipcc_wrapper() {
  cat <<'EOF'
#!/bin/sh
# overlay hipcc wrapper (written by tools/rocm-toolchain.sh).
# Drops -parallel-jobs=N, which only AMD's own LLVM accepts (Debian's clang
# rejects it), and puts ccache in front when present (OVERLAY_NO_CCACHE=1: off).
real=/usr/bin/hipcc
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n - 1))
  case $a in
    -parallel-jobs=*|--parallel-jobs=*) ;;
    *) set -- "$@" "$a" ;;
  esac
done
if [ -z "${OVERLAY_NO_CCACHE:-}" ] && command -v ccache >/dev/null 2>&1; then
  exec ccache "$real" "$@"
fi
exec "$real" "$@"
EOF
}

apt_conf() {
  cat <<'EOF'
// written by overlay tools/rocm-toolchain.sh
// the archive snapshot's Release files are past their Valid-Until date
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
}

dpkg_excludes() {
  cat <<'EOF'
# written by overlay tools/rocm-toolchain.sh: GPU kernel blobs (not needed to
# compile) and documentation stay out of this compile-only chroot
path-exclude=/usr/lib/x86_64-linux-gnu/rocblas/*/library/*
path-exclude=/usr/lib/x86_64-linux-gnu/hipblaslt/library/*
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
EOF
}

pkgs_installed() {
  local ch=$1; shift
  local out
  out=$(chroot "$ch" dpkg-query -W -f='${db:Status-Abbrev}\n' "$@" 2>/dev/null) || return 1
  [[ $(grep -c '^ii' <<<"$out") -eq $# ]]
}

cmake_args() {
  local ch=$1
  printf '%s\n' \
    "-DCMAKE_HIP_COMPILER=$HIPCC_WRAPPER" \
    "-DCMAKE_CXX_FLAGS=-include format" \
    "-DUSE_SYSTEM_FMT=ON" \
    "-DMLX_BUILD_GGUF=OFF" \
    "-DFETCHCONTENT_FULLY_DISCONNECTED=ON" \
    "-DFETCHCONTENT_SOURCE_DIR_JSON=$JSON_DIR"
}

# q WORD: WORD as one shell word, single-quoted only when needed (Python's
# shlex.split reads it back).
q() {
  local sq="'" esc="'\\''"
  if [[ $1 =~ ^[A-Za-z0-9_./:=+,@%-]+$ ]]; then printf '%s' "$1"
  else printf "'%s'" "${1//$sq/$esc}"; fi
}

toolchain_env() {
  local root=$1 ch=$1/chroot words= a rocmver
  while IFS= read -r a; do words+="${words:+ }$(q "$a")"; done < <(cmake_args "$ch")
  case $words in *[\$\`\"\\]*) die 8 "unexpected characters in the CMake arguments: $words" ;; esac
  rocmver=$(chroot "$ch" dpkg-query -W -f='${Version}' libamdhip64-dev 2>/dev/null || true)
  cat <<EOF
# written by overlay tools/rocm-toolchain.sh; KEY=VALUE, each value one shell word
# (source it from sh/bash, or read each value with Python's shlex.split).
# *_IN_CHROOT paths are valid inside the chroot only: run the build as
#   \$OVERLAY_TOOLCHAIN_EXEC --bind SRC --bind BUILD -- cmake ... \$OVERLAY_CMAKE_ARGS
# OVERLAY_CMAKE_ARGS holds several shell words (bash: eval "a=(\$OVERLAY_CMAKE_ARGS)",
# Python: shlex.split); cmake-args.txt has the same arguments, one per line.
# rocWMMA is not available here: compile-check with gfx1030 or gfx906.
OVERLAY_TOOLCHAIN_ROOT=$(q "$root")
OVERLAY_TOOLCHAIN_CHROOT=$(q "$ch")
OVERLAY_TOOLCHAIN_SCRIPT=$(q "$SELF")
OVERLAY_TOOLCHAIN_EXEC=$(q "$(q "$SELF") exec --root $(q "$root")")
OVERLAY_HIPCC_IN_CHROOT=$HIPCC_WRAPPER
OVERLAY_JSON_SOURCE_DIR_IN_CHROOT=$JSON_DIR
OVERLAY_CMAKE_ARGS="$words"
OVERLAY_ROCM_ARCH_DEFAULT=gfx1030
OVERLAY_ROCM_VERSION=$(q "$rocmver")
EOF
}

verify_chroot() {
  local ch=$1 t
  t=$(mktemp -d "$ch/tmp/overlay-verify.XXXXXX")
  cat >"$t/probe.hip" <<'EOF'
#include <hip/hip_runtime.h>
#include <hipblaslt/hipblaslt.h>
#include <rocblas/rocblas.h>
__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }
int main() { float* p = nullptr; hipLaunchKernelGGL(k, dim3(1), dim3(32), 0, 0, p); return 0; }
EOF
  local inside=/tmp/${t##*/}
  if run_in_chroot "$ch" env OVERLAY_NO_CCACHE=1 "$HIPCC_WRAPPER" -c "$inside/probe.hip" \
       -o "$inside/probe.o" --offload-arch=gfx1030 -parallel-jobs=2 -fPIC; then
    rm -rf "$t"; return 0
  fi
  rm -rf "$t"; return 1
}

cmd_verify() {
  local root=$DEFAULT_ROOT
  while (($#)); do
    case $1 in
      --root) root=${2:?}; shift 2 ;; --root=*) root=${1#*=}; shift ;;
      *) die 2 "verify: unknown option '$1'" ;;
    esac
  done
  need_root verify
  root=$(readlink -m "$root")
  [[ -f $root/READY ]] || die 9 "no toolchain at $root (run: $SELF --root $root)"
  verify_chroot "$root/chroot" || die 8 "the HIP probe did not compile in $root/chroot"
  say "ok: a HIP probe compiled for gfx1030 in $root/chroot"
}

cmd_env() {
  local root=$DEFAULT_ROOT
  while (($#)); do
    case $1 in
      --root) root=${2:?}; shift 2 ;; --root=*) root=${1#*=}; shift ;;
      *) die 2 "env: unknown option '$1'" ;;
    esac
  done
  root=$(readlink -m "$root")
  [[ -f $root/READY ]] || die 9 "no toolchain at $root (run: $SELF --root $root)"
  printf '%s\n' "$root/toolchain.env"
}

cmd_provision() {
  local root=$DEFAULT_ROOT mirror=${OVERLAY_DEBIAN_MIRROR:-} host_deps=0
  while (($#)); do
    case $1 in
      --root) root=${2:?--root needs a directory}; shift 2 ;;
      --root=*) root=${1#*=}; shift ;;
      --mirror) mirror=${2:?--mirror needs a URL}; shift 2 ;;
      --mirror=*) mirror=${1#*=}; shift ;;
      --install-host-deps) host_deps=1; shift ;;
      -h|--help) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die 2 "unknown option '$1' (try --help)" ;;
    esac
  done
  need_root
  root=$(readlink -m "$root")
  local ch=$root/chroot t0=$SECONDS
  mkdir -p "$root"

  exec 9>>"$root/.lock"
  flock -n 9 || die 10 "another provisioning of $root is running"

  CHANGED=0
  local net_checked=0
  ensure_net() {
    ((net_checked)) && return 0
    if [[ -z $mirror ]]; then
      mirror=$(host_mirror) || die 5 "no Debian mirror found in /etc/apt/sources.list(.d); pass --mirror URL"
    fi
    mirror_reachable "$mirror" || die 5 "Debian mirror unreachable: $mirror (dists/$BASE_SUITE/Release); check the network or pass --mirror URL"
    net_checked=1
  }

  # 1. the minbase chroot
  if [[ ! -f $root/.debootstrap-done ]]; then
    rm -f "$root/READY"
    if ! command -v debootstrap >/dev/null; then
      if ((host_deps)); then
        say "installing debootstrap on the host (--install-host-deps)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >/dev/null 2>&1 ||
          { apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >/dev/null; } ||
          die 4 "could not install debootstrap on the host"
      else
        die 4 "debootstrap is missing on the host: apt-get install debootstrap (or rerun with --install-host-deps)"
      fi
    fi
    ensure_net
    if [[ -e $ch ]]; then
      mounts_below "$ch" && die 6 "$ch has mounts below it (an exec still running?); not removing it"
      say "removing an incomplete chroot at $ch"
      rm -rf --one-file-system "$ch"
    fi
    say "debootstrap --variant=minbase $BASE_SUITE $ch $mirror"
    debootstrap --variant=minbase "$BASE_SUITE" "$ch" "$mirror" >"$root/debootstrap.log" 2>&1 ||
      die 6 "debootstrap failed; see $root/debootstrap.log"
    touch "$root/.debootstrap-done"
    CHANGED=1
  fi

  # 2. apt and dpkg configuration (before any package install)
  write_if_changed "$ch/etc/apt/apt.conf.d/99overlay" 0644 < <(apt_conf)
  mkdir -p "$ch/etc/dpkg/dpkg.cfg.d"
  write_if_changed "$ch/etc/dpkg/dpkg.cfg.d/99overlay-excludes" 0644 < <(dpkg_excludes)
  write_if_changed "$ch/usr/sbin/policy-rc.d" 0755 < <(printf '#!/bin/sh\nexit 101\n')
  local sources_mirror=$mirror
  if [[ -z $sources_mirror && -f $ch/etc/apt/sources.list ]]; then
    sources_mirror=$(awk '$1 == "deb" { print $2; exit }' "$ch/etc/apt/sources.list")
  fi
  [[ -n $sources_mirror ]] || { ensure_net; sources_mirror=$mirror; }
  write_if_changed "$ch/etc/apt/sources.list" 0644 < <(printf 'deb %s %s main\ndeb %s %s main\n' \
    "$sources_mirror" "$BASE_SUITE" "$sources_mirror" "$ROCM_SUITE")
  ((CHANGED)) && rm -f "$root/READY"

  # 3. packages
  if ! pkgs_installed "$ch" "${BASE_PKGS[@]}" "${ROCM_PKGS[@]}"; then
    rm -f "$root/READY"
    ensure_net
    say "apt-get update + install in the chroot (log: $root/apt.log)"
    {
      run_in_chroot "$ch" dpkg --configure -a &&
      run_in_chroot "$ch" apt-get update &&
      run_in_chroot "$ch" apt-get install -y "${BASE_PKGS[@]}" &&
      run_in_chroot "$ch" apt-get install -y -t "$ROCM_SUITE" "${ROCM_PKGS[@]}" &&
      run_in_chroot "$ch" apt-get clean
    } >"$root/apt.log" 2>&1 || { tail -n 15 "$root/apt.log" >&2; die 7 "apt-get in the chroot failed; see $root/apt.log"; }
    CHANGED=1
  fi

  # 4. quirk 2 (hipcc wrapper) and the offline nlohmann-json FetchContent dir
  write_if_changed "$ch$HIPCC_WRAPPER" 0755 < <(hipcc_wrapper)
  mkdir -p "$ch$JSON_DIR/single_include"
  if [[ $(readlink "$ch$JSON_DIR/single_include/nlohmann" || true) != /usr/include/nlohmann ]]; then
    ln -sfn /usr/include/nlohmann "$ch$JSON_DIR/single_include/nlohmann"
    CHANGED=1
  fi

  # 5. check, record, mark
  if ((CHANGED)) || [[ ! -f $root/READY ]]; then
    rm -f "$root/READY"
    say "checking: compiling a HIP probe for gfx1030"
    verify_chroot "$ch" || die 8 "the HIP probe did not compile in $ch (the chroot is kept; rerun after fixing)"
  fi
  write_if_changed "$root/versions.txt" 0644 < <(
    printf '# dpkg-query -W in the overlay ROCm toolchain chroot (%s base, ROCm from %s)\n' "$BASE_SUITE" "$ROCM_SUITE"
    chroot "$ch" dpkg-query -W -f='${Package}\t${Version}\n' | LC_ALL=C sort)
  write_if_changed "$root/cmake-args.txt" 0644 < <(cmake_args "$ch")
  write_if_changed "$root/toolchain.env" 0644 < <(toolchain_env "$root")
  if [[ ! -f $root/READY ]]; then
    date -u +%Y-%m-%dT%H:%M:%SZ >"$root/READY"
  fi
  if ((CHANGED)); then
    say "provisioned $root in $((SECONDS - t0)) s"
  else
    say "up to date: $root (nothing changed, $((SECONDS - t0)) s)"
  fi
  say "package versions: $root/versions.txt"
  say "build settings:   $root/toolchain.env"
}

# ------------------------------------------------------------------- dispatch

case ${1:-} in
  __inner) shift; inner_exec "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  env) shift; cmd_env "$@" ;;
  verify) shift; cmd_verify "$@" ;;
  provision) shift; cmd_provision "$@" ;;
  *) cmd_provision "$@" ;;
esac
