#!/usr/bin/env bash
# The logic of the vllm-doctor composite action (action.yml), kept here so it can be run and tested outside
# GitHub. Every input arrives as an environment variable; nothing is ever interpolated into a command line.
#
#   action-run.sh install   install vllm-doctor into a private venv; output `bin` = path of the command
#   action-run.sh run       SARIF file + annotations/job summary + outputs; exits 0 (or 2 on an error)
#   action-run.sh gate      exit 1 when the run found something at or above fail-on
#
# Inputs (env): INPUT_LOG (a path; several: one per line), INPUT_FAIL_ON (error|warning|info|never),
# INPUT_FORMAT (github|text|markdown|json|jsonl|sarif), INPUT_VERSION (PyPI version; empty = the action's
# own checkout), INPUT_CONFIG_FILE (optional), INPUT_SARIF (optional output path).
# Runner env used: GITHUB_ACTION_PATH, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, RUNNER_TEMP.
# For local runs: VLLM_DOCTOR_BIN (the command to run), VLLM_DOCTOR_SKIP_INSTALL=true (use vllm-doctor on PATH).
set -euo pipefail

escape_data() {  # workflow-command data escaping: % CR LF
  local s=${1//%/%25}
  s=${s//$'\r'/%0D}
  printf '%s' "${s//$'\n'/%0A}"
}

fail() {  # fail MESSAGE [CODE]: an error annotation (escaped: it may quote an input) and exit
  printf '::error title=vllm-doctor action::%s\n' "$(escape_data "$1")"
  exit "${2:-2}"
}

output() {  # output NAME VALUE: a step output (printed when not in Actions)
  if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
    printf '%s=%s\n' "$1" "$2" >> "$GITHUB_OUTPUT"
  else
    printf 'output %s=%s\n' "$1" "$2"
  fi
}

tmp_root() { printf '%s' "${RUNNER_TEMP:-${TMPDIR:-/tmp}}"; }

cmd_install() {
  if [[ "${VLLM_DOCTOR_SKIP_INSTALL:-}" == "true" ]]; then
    local found
    found=$(command -v vllm-doctor) || fail "VLLM_DOCTOR_SKIP_INSTALL=true but vllm-doctor is not on PATH"
    output bin "$found"
    return
  fi
  local version=${INPUT_VERSION:-}
  local source
  if [[ -n "$version" ]]; then
    [[ "$version" =~ ^[0-9][0-9A-Za-z.+!_-]*$ ]] || fail "version must be a release number such as 0.1.0, not: $version"
    source="vllm-log-doctor==$version"
  else
    source=${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}
    [[ -f "$source/pyproject.toml" ]] || fail "no pyproject.toml in the action's checkout ($source); set the version input"
  fi
  local venv
  venv="$(tmp_root)/vllm-doctor-venv"
  python3 -m venv "$venv" || fail "python3 -m venv failed; add actions/setup-python before this action"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$source" \
    || fail "pip could not install $source"
  [[ -x "$venv/bin/vllm-doctor" ]] || fail "the install did not provide vllm-doctor"
  "$venv/bin/vllm-doctor" --version
  output bin "$venv/bin/vllm-doctor"
}

cmd_run() {
  local bin=${VLLM_DOCTOR_BIN:-vllm-doctor}
  local fail_on=${INPUT_FAIL_ON:-error}
  local format=${INPUT_FORMAT:-github}
  case "$fail_on" in error|warning|info|never) ;; *) fail "fail-on must be error, warning, info or never, not: $fail_on" ;; esac
  case "$format" in github|text|markdown|json|jsonl|sarif) ;; *) fail "format must be github, text, markdown, json, jsonl or sarif, not: $format" ;; esac

  local logs=() line
  while IFS= read -r line || [[ -n "$line" ]]; do
    line=${line%$'\r'}
    [[ -n "${line//[[:space:]]/}" ]] || continue
    [[ -f "$line" && -r "$line" ]] || fail "log file not found or unreadable: $line"
    logs+=("$line")
  done <<< "${INPUT_LOG:-}"
  (( ${#logs[@]} )) || fail "the log input is empty: give the path of the vLLM log to diagnose"

  local extra=(--no-color)
  if [[ -n "${INPUT_CONFIG_FILE:-}" ]]; then
    [[ -f "$INPUT_CONFIG_FILE" ]] || fail "config-file not found: $INPUT_CONFIG_FILE"
    extra+=(--config-file "$INPUT_CONFIG_FILE")
  fi
  local sarif=${INPUT_SARIF:-}
  [[ -n "$sarif" ]] || sarif="$(tmp_root)/vllm-doctor.sarif"
  # the path is written to $GITHUB_OUTPUT as `sarif=PATH`: a line break would add outputs of its own
  [[ "$sarif" != *$'\n'* && "$sarif" != *$'\r'* ]] || fail "sarif must be one path, without line breaks"
  mkdir -p "$(dirname "$sarif")"

  # 1. the SARIF file, for github/codeql-action/upload-sarif (never gates)
  "$bin" check --format sarif --exit-zero --output "$sarif" "${extra[@]}" -- "${logs[@]}" \
    || fail "vllm-doctor could not diagnose the log (see the error above)"

  # 2. the report in the chosen format: annotations and the job summary with `github` (which fences its
  #    own text); any other format is echoed between stop-commands markers, so no line of it is run
  local rc=0 token=""
  if [[ "$format" != "github" ]]; then
    token="vllm-doctor-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    printf '::stop-commands::%s\n' "$token"
  fi
  "$bin" check --format "$format" --fail-on "$fail_on" "${extra[@]}" -- "${logs[@]}" || rc=$?
  [[ -z "$token" ]] || printf '\n::%s::\n' "$token"
  (( rc <= 1 )) || fail "vllm-doctor failed with exit code $rc (see the error above)" "$rc"
  if [[ "$format" != "github" && -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
    "$bin" check --format markdown --exit-zero "${extra[@]}" -- "${logs[@]}" >> "$GITHUB_STEP_SUMMARY" || true
  fi

  # 3. outputs: counts by severity, read back from the SARIF file: each input's summary, the counts the text,
  #    JSON and Markdown reports print (the start-up figures are context, not a finding, so they are not counted)
  local python=python3
  [[ -x "$(dirname "$bin")/python" ]] && python="$(dirname "$bin")/python"
  local counts
  counts=$("$python" - "$sarif" <<'PY'
import json, sys
run = json.load(open(sys.argv[1], encoding="utf-8"))["runs"][0]
total = {"error": 0, "warning": 0, "info": 0}
for doc in (run.get("properties") or {}).get("inputs") or []:
    for level, n in (doc.get("summary") or {}).items():
        total[level] = total.get(level, 0) + int(n)
print(sum(total.values()), total["error"], total["warning"], total["info"])
PY
  ) || fail "could not read the SARIF file $sarif"
  local findings errors warnings notes
  read -r findings errors warnings notes <<< "$counts"
  output findings "$findings"
  output errors "$errors"
  output warnings "$warnings"
  output notices "$notes"
  output sarif "$sarif"
  output exit-code "$rc"
}

cmd_gate() {
  local code=${EXIT_CODE:-}
  case "$code" in
    0) echo "vllm-doctor: nothing at or above --fail-on ${INPUT_FAIL_ON:-error}" ;;
    1) echo "vllm-doctor: ${FINDINGS:-some} finding(s); at least one is at or above --fail-on ${INPUT_FAIL_ON:-error}" >&2
       exit 1 ;;
    *) fail "the run step did not report an exit code" ;;
  esac
}

case "${1:-}" in
  install) cmd_install ;;
  run) cmd_run ;;
  gate) cmd_gate ;;
  *) echo "usage: $0 install|run|gate" >&2; exit 2 ;;
esac
