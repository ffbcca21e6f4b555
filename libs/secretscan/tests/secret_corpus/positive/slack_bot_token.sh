#! expect: slack_token@1
curl -s -d "token={{slack}}" https://slack.com/api/chat.postMessage
