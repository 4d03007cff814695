#!/usr/bin/env bash
# Writes a one-shape CSV for `finegemm bench --shapes` and prints its path (used by profile.sh and dram-traffic.sh).
#   scripts/shape-file.sh "kind,groups,m,n,k" [TAG]
set -euo pipefail
file=$(mktemp "/tmp/${2:-shape}-XXXX.csv")
printf 'kind,groups,m,n,k\n%s\n' "$1" > "$file"
echo "$file"
