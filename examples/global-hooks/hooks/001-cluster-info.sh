#!/usr/bin/env bash
# Sample global hook: on startup, records when bosun started (memory values) and makes
# sure a config value exists (written back to the addon-operator ConfigMap).
if [[ "$1" == "--config" ]]; then
  cat <<'YAML'
configVersion: v1
onStartup: 1
beforeAll: 1
YAML
  exit 0
fi
set -euo pipefail
binding=$(sed -n 's/.*"binding":"\([^"]*\)".*/\1/p' "$BINDING_CONTEXT_PATH")
echo "binding ${binding}; values: $(cat "$VALUES_PATH")"
if [[ "$binding" == "onStartup" ]]; then
  echo "[{\"op\":\"add\",\"path\":\"/global/startedAt\",\"value\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}]" > "$VALUES_JSON_PATCH_PATH"
  if ! grep -q '"greeting"' "$CONFIG_VALUES_PATH"; then
    echo '[{"op":"add","path":"/global/greeting","value":"hello from bosun"}]' > "$CONFIG_VALUES_JSON_PATCH_PATH"
  fi
fi
