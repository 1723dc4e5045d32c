#!/usr/bin/env bash
# Where the flight recorder's own time goes on the default decode step, over CUDA against the
# mock floor (issue 28: about 480 ns a recorded call on the H200, 260 on the mock). The H200
# image has no perf, so one is carried: B/perf.tar.xz holds this machine's /usr/bin/perf and
# the libraries it links (scripts/gpu-profile-recorder.sh pack makes it). B/flight-steps is
# benches/flight_steps.rs stripped with --strip-debug (symbols kept, for perf).
#   pack:  scripts/gpu-profile-recorder.sh pack   (here; writes gpu-bin/perf.tar.xz)
#   run:   OUT=dir scripts/gpu-profile-recorder.sh (on the device)
set -uo pipefail
B=${B:-gpu-bin}
if [ "${1:-}" = pack ]; then
  set -e
  d=$(mktemp -d)
  mkdir -p "$d/lib" "$B"
  cp /usr/bin/perf "$d/"
  ldd /usr/bin/perf | awk '/=>/{print $3}' | grep -v -E '/libc.so|/libm.so|ld-linux' |
    xargs -I{} cp -L {} "$d/lib/"
  tar -C "$d" -cJf "$B/perf.tar.xz" .
  rm -rf "$d"
  ls -l "$B/perf.tar.xz"
  exit 0
fi
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
P=$(mktemp -d)
tar -C "$P" -xJf "$B/perf.tar.xz"
# A file, not a function: `env VAR=... perf` must find it.
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/lib" exec "%s/perf" "$@"\n' "$P" "$P" >"$P/run-perf"
chmod +x "$P/run-perf"
perf() { "$P/run-perf" "$@"; }
chmod +x "$B/flight-steps"
STEPS=${STEPS:-500}
ROUNDS=${ROUNDS:-3}
{
  echo "== perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>&1)"
  perf stat -e cpu-clock,cycles,instructions true 2>&1 | tail -8
  for back in null cuda; do
    if [ "$back" = null ]; then env=(GPUTAPE_FS_NULL=1); else env=(GPUTAPE_STEP_CUDA=1 GPUTAPE_FS_NO_FLOOR=1); fi
    echo "== $back: perf stat"
    env "${env[@]}" GPUTAPE_FS_ONLY=decode GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS \
      "$P/run-perf" stat -e task-clock,cycles,instructions,cache-misses,L1-dcache-load-misses,LLC-load-misses,iTLB-load-misses,dTLB-load-misses \
      "$B/flight-steps" --bench 2>&1 | grep -v '^ *$' | tail -22
    echo "== $back: profile"
    env "${env[@]}" GPUTAPE_FS_ONLY=decode GPUTAPE_FS_STEPS=$STEPS GPUTAPE_FS_ROUNDS=$ROUNDS \
      "$P/run-perf" record -F 9999 -e cpu-clock --call-graph dwarf,16384 -o "$P/$back.data" \
      "$B/flight-steps" --bench 2>&1 | grep -E 'decode|perf record|error|Error' | head -5
    perf script -i "$P/$back.data" -F ip,sym --no-inline 2>/dev/null >"$P/$back.script"
    echo "-- $back: the recorder's own samples (scripts/perf-recorder-own.py)"
    python3 scripts/perf-recorder-own.py <"$P/$back.script" | head -70
    echo "-- $back: self time by symbol, whole run"
    perf report -i "$P/$back.data" --no-children -g none --sort sym --stdio --no-inline 2>/dev/null |
      grep -v '^#' | grep -v '^$' | grep '%' | head -40
    xz -T4 -c "$P/$back.script" >"$OUT/$back.script.xz"
  done
} 2>&1 | tee "$OUT/gpu-profile-recorder.log"
rm -rf "$P"
