#!/bin/sh
# Switchyard hook: posts one line per event to a Slack (or Mattermost,
# Rocket.Chat) incoming webhook. The payload arrives on stdin; the webhook
# URL comes from SLACK_WEBHOOK_URL in the controller's environment.
#   hooks:
#     - name: slack
#       events: [dead_primary, failover_start, failover_end, switchover_end, alarm_raised, alarm_cleared, node_quarantined]
#       command: [/usr/local/lib/switchyard/slack.sh]
set -eu
: "${SLACK_WEBHOOK_URL:?set SLACK_WEBHOOK_URL in the controller environment}"
jq -c '{text: ("*\(.event)* cluster `\(.cluster)`"
  + (if .node != null then " node `\(.node)`" else "" end)
  + (if .result != null then " result *\(.result)*" else "" end)
  + (if .plan.candidate != null then " candidate `\(.plan.candidate)`" else "" end)
  + " epoch \(.epoch): \(.reason)")}' |
  curl -fsS --max-time 8 -H 'Content-Type: application/json' --data-binary @- "$SLACK_WEBHOOK_URL" >/dev/null
