#!/usr/bin/env bash
# Regenerate the pictures of `gputape report` in docs/report/: traces recorded now, with the
# mock (so in the trace format this build writes), each made into its HTML page by
# `gputape report` and photographed by headless Chromium. Two pages: the README's recording
# (`record --step 5`, a clean decode step) and a step with a planted out-of-bounds write that
# the mock reports as an illegal address at the next copy (what the Faults section is for).
#
#   scripts/report-picture.sh               # release build, as the README runs gputape
#   PROFILE=dev scripts/report-picture.sh   # a debug build (quicker to build, slower to run)
#
# Needs Chromium (Debian: apt-get install -y chromium; or CHROMIUM=/path/to/chrome).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
profile=${PROFILE:-release}
case "$profile" in
dev) dir=debug ;;
*) dir=$profile ;;
esac
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$chromium" ]; then
    echo "report-picture: no Chromium found (apt-get install -y chromium, or set CHROMIUM)" >&2
    exit 1
fi
cargo build --profile "$profile" --bin gputape
# On the PATH, and relative names: the pages show the command lines as the README gives
# them (a trace's provenance is its recording's command line; a page's title, its path).
export PATH="$root/target/$dir:$PATH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
gputape record --step 5 -o step5.gtape
gputape record --config tiny --step 4 --fault-step 4 --fault-overrun 268435456 -o fault_step4.gtape
mkdir -p "$root/docs/report"
for name in step5 fault_step4; do
    gputape report "$name.gtape" -o "$name.html"
    # --no-sandbox: Chromium refuses to run as root with its sandbox; the page is ours, has
    # no scripts and fetches nothing.
    "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --force-device-scale-factor=1 --window-size=1300,1800 \
        --screenshot="$work/$name.png" "file://$work/$name.html" 2>/dev/null
    cp "$work/$name.png" "$root/docs/report/$name.png"
    echo "wrote docs/report/$name.png"
done
