#!/usr/bin/env bash
# Fails when a file under src/<layer> includes a layer above it (docs/ARCHITECTURE.md).
set -u
src=${1:?usage: layering_test.sh SRC_DIR}
declare -A allowed=(
  [core]="core" [backend]="core backend" [comm]="core backend comm" [kv]="core kv"
  [model]="core backend comm model" [engine]="core backend comm model kv engine"
  [text]="core text" [server]="core engine text server kv"
  [cli]="core backend comm model kv engine text server cli")
layers=" ${!allowed[*]} "
status=0
for layer in "${!allowed[@]}"; do
  [ -d "$src/$layer" ] || continue
  while IFS= read -r hit; do
    included=$(printf '%s' "$hit" | sed -E 's/.*#include *"([a-z_]+)\/.*/\1/')
    case "$layers" in *" $included "*) ;; *) continue ;; esac
    case " ${allowed[$layer]} " in
      *" $included "*) ;;
      *) echo "layer violation: $hit"; status=1 ;;
    esac
  done < <(grep -rnE '^\s*#include *"[a-z_]+/' "$src/$layer")
done
[ $status -eq 0 ] && echo "layering: every include points down"
exit $status
