#!/usr/bin/env bash
# What a call to the workplace's GPU machine carries, and how to make it fit. A device run copies
# the working tree (tracked files and untracked files git does not ignore) plus the paths named
# in `carry`, 64 MiB in all; the tracked tree alone is larger (the parity fixtures), and the GPU
# check reads only the flow and Qwen2.5-VL dumps of them, beside the bundle.
#
#   tools/device_tree.sh size [BUNDLE_DIR]   MiB that would travel (and with the bundle)
#   tools/device_tree.sh slim                the fixtures the GPU check does not read leave the
#                                            index and are ignored (.git/info/exclude): they stay
#                                            on disk and no longer travel
#   tools/device_tree.sh restore             back as committed (index and exclude list)
#
# A GPU session: tools/gpu_bundle.sh gpu-bundle; tools/device_tree.sh slim; tools/device_tree.sh
# size gpu-bundle; then the device call with carry ["gpu-bundle"] running
# `tools/gpu_check.sh --bundle gpu-bundle $OUT/check`; then tools/device_tree.sh restore. Commit
# nothing between slim and restore (the index holds the fixtures' removal).
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mib=64
# Read by tests/examples/gpu_check.rs (flow networks, Qwen2.5-VL); the tiny recipe's clips are
# under tests/data/, outside the fixtures.
keep="flow qwen2_5_vl"
exclude=.git/info/exclude
begin="# >>> tools/device_tree.sh slim" end="# <<< tools/device_tree.sh slim"

mib() { awk '{ s += $1 } END { printf "%.1f", s / 1048576 }'; }
traveling() { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | mib; }

case "${1:-size}" in
  size)
    tree=$(traveling)
    bundle=0.0
    [ -n "${2:-}" ] && bundle=$(find "$2" -type f -printf '%s\n' | mib)
    awk -v t="$tree" -v b="$bundle" -v l="$limit_mib" 'BEGIN {
      printf "working tree %.1f MiB, bundle %.1f MiB, together %.1f MiB (limit %d MiB)\n", t, b, t + b, l
      exit (t + b > l) }' || { echo "over the limit: tools/device_tree.sh slim"; exit 1; }
    ;;
  slim)
    git diff --cached --quiet || { echo "the index has staged changes: commit or unstage them first"; exit 1; }
    grep -qxF "$begin" "$exclude" 2>/dev/null && { echo "already slim: tools/device_tree.sh restore first"; exit 1; }
    echo "$begin" >> "$exclude"
    for dir in tests/fixtures/*/; do
      family=$(basename "$dir")
      case " $keep " in *" $family "*) continue ;; esac
      git rm -r -q --cached -- "$dir"
      echo "/$dir" >> "$exclude"
    done
    echo "$end" >> "$exclude"
    "$0" size
    ;;
  restore)
    git reset -q -- tests/fixtures
    [ -f "$exclude" ] && sed -i "\\|^$begin\$|,\\|^$end\$|d" "$exclude"
    git status --short -- tests/fixtures | head -n 5
    "$0" size || true
    ;;
  *)
    echo "usage: tools/device_tree.sh size [BUNDLE_DIR] | slim | restore" >&2
    exit 2
    ;;
esac
