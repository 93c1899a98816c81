#!/bin/sh
# Switchyard hook: pages through the PagerDuty Events API v2 — triggers an
# incident for a dead primary an operator must fail over, a failed failover
# or an alarm, and resolves it when the failover is done or the alarm
# cleared (dedup_key: cluster, and alarm code). The routing key comes from
# PAGERDUTY_ROUTING_KEY in the controller's environment.
#   hooks:
#     - name: page
#       events: [dead_primary, failover_end, alarm_raised, alarm_cleared]
#       command: [/usr/local/lib/switchyard/pagerduty.sh]
#       retries: 5
set -eu
: "${PAGERDUTY_ROUTING_KEY:?set PAGERDUTY_ROUTING_KEY in the controller environment}"
url=${PAGERDUTY_EVENTS_URL:-https://events.pagerduty.com/v2/enqueue}
jq -c --arg key "$PAGERDUTY_ROUTING_KEY" '
  (if .event == "alarm_raised" or .event == "alarm_cleared" then "switchyard/\(.cluster)/\(.alarm.code)/\(.alarm.node // "")"
   else "switchyard/\(.cluster)/primary" end) as $dedup
  | (if .event == "alarm_cleared" or (.event == "failover_end" and .result == "done") then "resolve" else "trigger" end) as $action
  | {routing_key: $key, event_action: $action, dedup_key: $dedup,
     payload: {summary: ("\(.event) on \(.cluster): \(.reason)" | .[0:1000]), source: "switchyard/\(.controller)",
               severity: (if .event == "alarm_raised" then "error" else "critical" end), custom_details: .}}' |
  curl -fsS --max-time 8 -H 'Content-Type: application/json' --data-binary @- "$url" >/dev/null
