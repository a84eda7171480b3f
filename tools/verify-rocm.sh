#!/usr/bin/env bash
# verify-rocm.sh: the stages of `make verify-rocm`, each reported as passed, failed
# or skipped (with the reason). Exit 1 when a stage failed (a required stage that
# was skipped counts as failed, see OVERLAY_REQUIRE), else 0.
#
#   1. overlay  `make verify-rocm-overlay` (every record of the overlay)
#   1b. behaviour  `overlay drift --behaviour`: the ROCm elementwise functors compiled
#               for the host (g++ and a HIP shim) against upstream's CPU functors;
#               fails on behaviour drift since the fork's merge base; no GPU and no
#               ROCm toolchain needed; skipped when g++ is absent
#   2. build    `overlay build --backend rocm $OVERLAY_BUILD_ARGS`
#               skipped when no ROCm toolchain exists (no hipcc on PATH / in
#               $ROCM_PATH, no provisioned tools/rocm-toolchain.sh root)
#   3. suites   `overlay suite run --backend rocm --child-dir build/rocm/suites`
#               skipped when the build did not pass, when there is no AMD GPU
#               (/dev/kfd absent), or when this overlay has no `suite` command
#   4. host-model  `overlay suite run --host-models`: the race lab (docs/race-lab.md),
#               MLX's ROCm host code on a model of HIP, hipBLASLt and rocBLAS under
#               sanitizers. Runs when there is no AMD GPU (or with
#               OVERLAY_HOST_MODELS=1); skipped when its toolchain is absent. It
#               is a host model: its result never stands for the GPU suites.
#
# Each stage prints a start line (`verify-rocm: <stage>: running ...`) before it
# runs, then its result.
#
# Environment: OVERLAY (the overlay executable, default .venv/bin/overlay), MAKE,
# OVERLAY_BUILD_ARGS (extra `overlay build` options, e.g. "--arch gfx1030"),
# OVERLAY_SUITE_ARGS (extra `overlay suite run` options),
# OVERLAY_STAGES (the stages to run, space- or comma-separated, default all; the
# others are reported skipped, "not in OVERLAY_STAGES": e.g. OVERLAY_STAGES="verify
# host-model" runs the race lab without the full ROCm build),
# OVERLAY_REQUIRE (stages that must run and pass, space- or comma-separated; a
# required stage that is skipped fails instead). Both take the names of `overlay
# ci`: verify (= overlay), check and build (= build: the full build compiles every
# unit the check would), suites, and host-model. An unknown name is exit 2.
# OVERLAY_HOST_MODEL_ARGS passes options to `overlay suite run --host-models` (e.g.
# "--runs 3"); OVERLAY_HOST_MODELS=1 runs the host-model stage on a machine with an
# AMD GPU too.
set -uo pipefail

OVERLAY=${OVERLAY:-.venv/bin/overlay}
MAKE=${MAKE:-make}
failed=0
declare -a summary=()
declare -A required=()

stage_names() {  # VARIABLE VALUE: the stage of each name in VALUE, one a line
  local name names
  IFS=$', \t' read -ra names <<< "$2"
  for name in "${names[@]}"; do
    case $name in
      '') ;;
      verify|overlay) echo overlay ;;
      behaviour) echo behaviour ;;
      check|build) echo build ;;
      suites) echo suites ;;
      host-model) echo host-model ;;
      *) printf 'verify-rocm: unknown stage %q in %s (verify, behaviour, check, build, suites, host-model)\n' "$name" "$1" >&2
         return 2 ;;
    esac
  done
}

declare -A selected=()
stages=$(stage_names OVERLAY_REQUIRE "${OVERLAY_REQUIRE:-}") || exit 2
for stage in $stages; do required[$stage]=1; done
stages=$(stage_names OVERLAY_STAGES "${OVERLAY_STAGES:-}") || exit 2
for stage in ${stages:-overlay behaviour build suites host-model}; do selected[$stage]=1; done

report() {  # STAGE STATE [REASON]
  local state=$2 reason=${3:-}
  if [[ $state == skipped && -n ${required[$1]:-} ]]; then
    state=failed reason="required, but skipped: $reason"
  fi
  local line="verify-rocm: $1: $state${reason:+ ($reason)}"
  printf '%s\n' "$line"
  summary+=("$line")
  [[ $state == failed ]] && failed=1
  return 0
}

starting() {  # STAGE WHAT: the start line of a stage
  printf 'verify-rocm: %s: running %s\n' "$1" "$2"
}

runs() {  # STAGE: true when OVERLAY_STAGES selects it, else reports it skipped
  [[ -n ${selected[$1]:-} ]] && return 0
  report "$1" skipped "not in OVERLAY_STAGES=${OVERLAY_STAGES:-}"
  return 1
}

# 1. the overlay's records
if runs overlay; then
  starting overlay "make verify-rocm-overlay (overlay verify: every record of the overlay)"
  if $MAKE --no-print-directory verify-rocm-overlay; then
    report overlay passed
  else
    report overlay failed "make verify-rocm-overlay exited $?"
  fi
fi

# 1b. behaviour drift of the ROCm functors (host code, no GPU)
if runs behaviour; then
  if ! command -v "${CXX:-g++}" >/dev/null 2>&1; then
    report behaviour skipped "no host C++ compiler (${CXX:-g++}) for overlay drift --behaviour"
  else
    starting behaviour "overlay drift --behaviour (the ROCm functors on the host against upstream's CPU functors)"
    if $OVERLAY drift --behaviour; then
      report behaviour passed
    else
      report behaviour failed "overlay drift --behaviour exited $?"
    fi
  fi
fi

# 2. the ROCm build
build_state=skipped
if runs build; then
  starting build "overlay build --backend rocm${OVERLAY_BUILD_ARGS:+ $OVERLAY_BUILD_ARGS} (a first build takes many minutes, over 15 on 2 cores, and prints little until it ends; OVERLAY_STAGES=\"verify host-model\" leaves it out)"
  errfile=$(mktemp)
  # stderr through tee into errfile (and on to stderr as it comes), stdout straight
  # out (fd 3): a pipeline, which bash waits for whole. A process substitution
  # (2> >(tee ...)) is not waited for: on a busy machine tee had not written the
  # "no ROCm toolchain" line when it was read, and the skip was reported as failed.
  {
    # shellcheck disable=SC2086
    $OVERLAY build --backend rocm ${OVERLAY_BUILD_ARGS:-} 2>&1 1>&3 3>&- | tee "$errfile" >&2 3>&-
    rc=${PIPESTATUS[0]}
  } 3>&1
  reason=$(grep -m1 '^overlay: ' "$errfile" | sed 's/^overlay: //')
  rm -f "$errfile"
  if ((rc == 0)); then
    build_state=passed; report build passed
  elif ((rc == 2)) && [[ $reason == "no ROCm toolchain"* || $reason == *"needs root"* ]]; then
    report build skipped "$reason"
  else
    build_state=failed; report build failed "overlay build exited $rc${reason:+: $reason}"
  fi
fi

# 3. the suites
if ! runs suites; then
  :
elif ! $OVERLAY suite --help >/dev/null 2>&1; then
  report suites skipped "this overlay has no 'suite' command"
elif [[ -z ${selected[build]:-} ]]; then
  report suites skipped "the build stage is not in OVERLAY_STAGES"
elif [[ $build_state != passed ]]; then
  report suites skipped "the build stage did not pass"
elif [[ ! -e /dev/kfd ]]; then
  report suites skipped "no AMD GPU: /dev/kfd absent"
else
  starting suites "overlay suite run --backend rocm --child-dir build/rocm/suites${OVERLAY_SUITE_ARGS:+ $OVERLAY_SUITE_ARGS}"
  # shellcheck disable=SC2086
  if $OVERLAY suite run --backend rocm --child-dir build/rocm/suites ${OVERLAY_SUITE_ARGS:-}; then
    report suites passed
  else
    report suites failed "overlay suite run exited $?"
  fi
fi

# 4. the host-model suites (race lab): not a GPU result, whatever they show
model_note="race lab: a host model of HIP, hipBLASLt and rocBLAS, not a GPU result"
if ! runs host-model; then
  :
elif ! $OVERLAY suite --help 2>/dev/null | grep -q "  build "; then
  report host-model skipped "this overlay has no race lab ('suite build')"
elif [[ -e /dev/kfd && -z ${OVERLAY_HOST_MODELS:-} ]]; then
  report host-model skipped "an AMD GPU is present: the GPU suites are the evidence (OVERLAY_HOST_MODELS=1 runs these too)"
else
  starting host-model "overlay suite run --host-models${OVERLAY_HOST_MODEL_ARGS:+ $OVERLAY_HOST_MODEL_ARGS} (the race lab: builds its children, then runs each suite; $model_note)"
  outfile=$(mktemp)
  # shellcheck disable=SC2086
  $OVERLAY suite run --host-models ${OVERLAY_HOST_MODEL_ARGS:-} 2>&1 | tee "$outfile"
  rc=${PIPESTATUS[0]}
  tally=$(grep -E '^[0-9]+ suite\(s\): ' "$outfile" | tail -1)
  skip=$(grep -m1 -E '^[^ ]+ +SKIPPED +' "$outfile" | sed -E 's/^[^ ]+ +SKIPPED +//')
  err=$(grep -m1 '^overlay: ' "$outfile" | sed 's/^overlay: //')
  rm -f "$outfile"
  if ((rc == 1)); then
    report host-model failed "overlay suite run --host-models exited 1; $model_note"
  elif ((rc != 0)); then
    report host-model failed "overlay suite run --host-models exited $rc${err:+: $err}"
  elif [[ $tally =~ ^[0-9]+\ suite\(s\):\ ([0-9]+)\ passed ]] && ((BASH_REMATCH[1] > 0)); then
    report host-model passed "$model_note"
  else
    report host-model skipped "${skip:-no host-model suite ran}"
  fi
fi

printf '\nverify-rocm summary\n'
printf '  %s\n' "${summary[@]}"
exit $failed
