#!/usr/bin/env bash
# Sample module hook: before each Helm run, adds a value to the module's memory values
# (journaled; restored after a restart). It is constant, so converges that change nothing
# create no new Helm revision.
if [[ "$1" == "--config" ]]; then
  echo '{"configVersion":"v1","beforeHelm":10}'
  exit 0
fi
set -euo pipefail
echo '[{"op":"add","path":"/greeter/setBy","value":"the beforeHelm hook"}]' > "$VALUES_JSON_PATCH_PATH"
