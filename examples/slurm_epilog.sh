#!/usr/bin/env bash
# Send a finished Slurm job's log to logdx and print the diagnosis.
#
# Install as EpilogSlurmctld (runs once per job on the controller) or call it from a per-job
# epilog on the batch host. Needs curl and python3 (for JSON); uses scontrol/sacct when present.
#
#   LOGDX_URL=http://logdx:8000 LOGDX_TOKEN=ldx_... examples/slurm_epilog.sh
#
# Environment:
#   LOGDX_URL, LOGDX_TOKEN     server and a `scheduler` token (logdx token create --role scheduler)
#   SLURM_JOB_ID               set by Slurm; SLURM_CLUSTER_NAME, SLURM_JOB_USER, SLURM_JOB_NODELIST too
#   LOGDX_LOG_FILE             the log to send (default: the job's StdOut from scontrol)
#   LOGDX_GPU_COUNT, LOGDX_JOB_STATE, LOGDX_STARTED_AT, LOGDX_ENDED_AT   override sacct
#   LOGDX_EXIT_CODE            override the job's exit code (exit:signal; default: scontrol's ExitCode,
#                              else SLURM_JOB_EXIT_CODE2)
#   LOGDX_WAIT_S               how long to poll a queued (202) diagnosis (default 120)
#   LOGDX_RETRIES              curl retries on connection errors (default 3)
#   LOGDX_RECOVER=1            then ask the restart controller to recover the job (probe, drain,
#                              requeue from the last complete checkpoint; dry-run until an admin
#                              enables the cluster: PUT /v1/clusters/NAME/controller). A job that
#                              ended cleanly (COMPLETED, or exit code 0:0 without a failure state)
#                              is not recovered.
#
# Without Slurm accounting (no sacct) the state comes from `scontrol show job`: while this epilog
# runs the job is COMPLETING, so its Reason names a timeout or node failure and ExitCode says how
# the batch script ended (a timed-out job reads 0:15 there but 0:0 in SLURM_JOB_EXIT_CODE2).
#
# A failing epilog drains the node in Slurm, so this script always exits 0; problems go to stderr.
set -uo pipefail

# why a curl call failed: the server's error body if it sent one, else curl's own message
_reason() {
  local body="$1" err
  err=$(tr '\n' ' ' <"$2" 2>/dev/null)
  [[ -n "$body" ]] && { echo "$body ${err}"; return; }
  echo "${err:-no response (curl gave no reason)}"
}

main() {
  # not ${VAR:?}: in a script that exits the whole shell with status 1, whatever main returns
  local url="${LOGDX_URL:-}" token="${LOGDX_TOKEN:-}" job_id="${SLURM_JOB_ID:-}"
  [[ -n "$url" ]] || { echo "logdx epilog: LOGDX_URL is not set; nothing sent" >&2; return 0; }
  [[ -n "$token" ]] || { echo "logdx epilog: LOGDX_TOKEN is not set; nothing sent" >&2; return 0; }
  [[ -n "$job_id" ]] || { echo "logdx epilog: SLURM_JOB_ID is not set (not running under Slurm); nothing sent" >&2; return 0; }
  local cluster="${SLURM_CLUSTER_NAME:-default}"
  local auth=(-H "Authorization: Bearer ${token}")
  local curl=(curl -sS --fail-with-body --max-time 600 --retry "${LOGDX_RETRIES:-3}" --retry-connrefused)
  # curl's own reason (connection refused, timeout, ...) goes to stderr: keep it for the message
  local errfile
  errfile=$(mktemp "${TMPDIR:-/tmp}/logdx-epilog.XXXXXX") \
    || { echo "logdx epilog: cannot create a temporary file; nothing sent" >&2; return 0; }
  trap 'rm -f "$errfile"' RETURN

  # the job's record while it completes (kept for MinJobAge after): one line of Key=Value pairs
  local rec=""
  command -v scontrol >/dev/null && rec=" $(scontrol show job -o "$job_id" 2>/dev/null | head -n1)"
  _field() { sed -n "s/.*[[:space:]]$1=\([^ ]*\).*/\1/p" <<<"$rec" | head -n1; }
  local log="${LOGDX_LOG_FILE:-}"
  [[ -z "$log" ]] && log=$(_field StdOut)
  [[ -n "$log" && -r "$log" ]] || { echo "logdx epilog: no readable log for job $job_id" >&2; return 0; }

  local state="${LOGDX_JOB_STATE:-}" started="${LOGDX_STARTED_AT:-}" ended="${LOGDX_ENDED_AT:-}"
  local gpus="${LOGDX_GPU_COUNT:-}"
  if command -v sacct >/dev/null && [[ -z "$state" ]]; then
    # State|Start|End|AllocTRES of the job allocation itself (first line)
    IFS='|' read -r state started ended tres < <(sacct -j "$job_id" -X -n -P -o State,Start,End,AllocTRES 2>/dev/null | head -n1)
    [[ -z "$gpus" ]] && gpus=$(sed -n 's/.*gres\/gpu=\([0-9]*\).*/\1/p' <<<"${tres:-}")
  fi
  # each attempt of a requeued job is its own upload: the job's env has SLURM_RESTART_COUNT,
  # EpilogSlurmctld has SLURM_JOB_RESTART_COUNT, scontrol shows Restarts
  local restarts="${SLURM_RESTART_COUNT:-${SLURM_JOB_RESTART_COUNT:-$(_field Restarts)}}"
  [[ "$restarts" =~ ^[0-9]+$ ]] || restarts=0
  local attempt=$((restarts + 1))
  # a run ended by a requeue (`scontrol requeue` of a running job: the controller restarting a
  # hung one) has its restart already counted when the epilog runs, and Slurm has cleared the
  # run's times for the next one (EndTime=Unknown, RunTime=00:00:00; a run that ended shows its
  # EndTime): it was attempt `restarts`, not the next one, whose own epilog comes later
  if (( restarts > 0 )) && [[ -n "$rec" && "$(_field EndTime)" == Unknown ]]; then
    attempt=$restarts
  fi
  local exit_code="${LOGDX_EXIT_CODE:-$(_field ExitCode)}"
  exit_code="${exit_code:-${SLURM_JOB_EXIT_CODE2:-}}"
  if [[ -z "$state" && -n "$rec" ]]; then
    state=$(_field JobState)
    if [[ "$state" == COMPLETING ]]; then
      case "$(_field Reason)" in
        TimeLimit) state=TIMEOUT ;;
        NodeDown|NodeFail) state=NODE_FAIL ;;
        *) state="" ;;  # not known until the epilog ends: the exit code tells
      esac
    fi
  fi
  local hosts=""
  if [[ -n "${SLURM_JOB_NODELIST:-}" ]] && command -v scontrol >/dev/null; then
    hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | paste -sd, -)
  fi

  local body
  body=$(JOB_ID="$job_id" CLUSTER="$cluster" STATE="$state" STARTED="$started" ENDED="$ended" \
         GPUS="$gpus" HOSTS="$hosts" JOB_USER="${SLURM_JOB_USER:-}" EXIT_CODE="$exit_code" \
         ATTEMPT="$attempt" python3 - <<'PY'
import json, os, re
state = os.environ["STATE"].split()[0].lower() if os.environ["STATE"] else ""
known = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "running", "pending"}
def when(v):  # sacct prints local time without a zone; Unknown/None when missing
    return v if v and v[0].isdigit() else None
body = {"cluster": os.environ["CLUSTER"], "external_id": os.environ["JOB_ID"], "scheduler": "slurm",
        "state": state if state in known else ("unknown" if state else None),
        "started_at": when(os.environ["STARTED"]), "ended_at": when(os.environ["ENDED"]),
        "gpu_count": int(os.environ["GPUS"]) if os.environ["GPUS"].isdigit() else None,
        "hosts": [h for h in os.environ["HOSTS"].split(",") if h],
        "user": os.environ["JOB_USER"] or None, "attempt": int(os.environ["ATTEMPT"]),
        "exit_code": os.environ["EXIT_CODE"] if re.fullmatch(r"\d{1,3}:\d{1,3}", os.environ["EXIT_CODE"]) else None}
print(json.dumps({k: v for k, v in body.items() if v not in (None, [])}))
PY
)
  local job
  job=$("${curl[@]}" "${auth[@]}" -H 'Content-Type: application/json' -d "$body" "$url/v1/jobs" 2>"$errfile") \
    || { echo "logdx epilog: cannot register job: $(_reason "$job" "$errfile")" >&2; return 0; }
  local id
  id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$job")

  # the whole log as the body, streamed from disk (gz/zst files are sent as they are)
  local put
  put=$("${curl[@]}" "${auth[@]}" -X PUT -H 'Content-Type: application/octet-stream' \
        --data-binary @"$log" "$url/v1/jobs/$id/log?attempt=$attempt" 2>"$errfile") \
    || { echo "logdx epilog: upload failed: $(_reason "$put" "$errfile")" >&2; return 0; }

  local out
  out=$("${curl[@]}" "${auth[@]}" -X POST -H 'Content-Type: application/json' -d "{\"attempt\": $attempt}" \
        "$url/v1/jobs/$id/diagnoses" 2>"$errfile") \
    || { echo "logdx epilog: diagnosis request failed: $(_reason "$out" "$errfile")" >&2; return 0; }
  local deadline=$((SECONDS + ${LOGDX_WAIT_S:-120}))
  while python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["status"] not in ("pending","running"))' <<<"$out"; do
    (( SECONDS < deadline )) || { echo "logdx epilog: diagnosis still queued: $out" >&2; return 0; }
    sleep 2
    out=$("${curl[@]}" "${auth[@]}" "$url/v1/diagnoses/$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$out")" 2>"$errfile") \
      || { echo "logdx epilog: cannot read the diagnosis: $(_reason "$out" "$errfile")" >&2; return 0; }
  done
  python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
if d["status"] != "done":
    print(f"logdx: diagnosis {d['id']} failed: {d.get('error')}"); sys.exit(0)
r = d["diagnosis"]
rc, act = r["root_cause"], r["action"]
print(f"logdx: job {d['job_id']} diagnosis {d['id']}: {rc['error_type']} ({rc['category']}, "
      f"confidence {rc['confidence']:.2f}) -> {act['kind']}"
      + (f" suspect hosts: {', '.join(act['suspect_hosts'])}" if act["suspect_hosts"] else ""))
for ev in rc["evidence"][:3]:
    print(f"  line {ev['line']}: {ev['text'][:200]}")
print(f"  {act['reason']}")
PY
  local clean=""
  if [[ "$state" == COMPLETED* ]]; then clean="it completed"
  elif [[ "$exit_code" == 0:0 && ! "$state" =~ ^(FAILED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) ]]; then
    clean="it ended with exit code 0:0"
  fi
  if [[ "${LOGDX_RECOVER:-0}" == 1 && -n "$clean" ]]; then
    echo "logdx: job $job_id not recovered: $clean"
  elif [[ "${LOGDX_RECOVER:-0}" == 1 ]]; then
    # one key per job attempt: a retried epilog never drains or requeues twice
    local rec
    local diag
    diag=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$out")
    rec=$("${curl[@]}" "${auth[@]}" -X POST -H "Idempotency-Key: slurm-$cluster-$job_id-$restarts" \
          -H 'Content-Type: application/json' -d "{\"diagnosis_id\": $diag}" \
          "$url/v1/jobs/$id/recover") || { echo "logdx epilog: recover failed: $rec" >&2; return 0; }
    python3 - "$rec" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
mode = "dry-run" if r["dry_run"] else "acted"
print(f"logdx: recovery {r['id']}: {r['action']} ({mode}, {r['status']}): {r['reason']}")
PY
  fi
}

main "$@" || true
exit 0
