#!/usr/bin/env bash
# Sample hooks-only module (no chart): logs what the enabled modules are when it starts and
# after every converge of its own.
if [[ "$1" == "--config" ]]; then
  echo '{"configVersion":"v1","onStartup":1,"afterHelm":1}'
  exit 0
fi
binding=$(sed -n 's/.*"binding":"\([^"]*\)".*/\1/p' "$BINDING_CONTEXT_PATH")
echo "audit ${binding}: values $(cat "$VALUES_PATH")"
