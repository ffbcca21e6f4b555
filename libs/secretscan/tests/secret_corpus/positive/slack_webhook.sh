#! expect: slack_token@2
# notify when training ends
curl -X POST -d '{"text":"done"}' https://hooks.slack.com/services/T{{upper9}}/B{{upper9}}/{{alnum24}}
