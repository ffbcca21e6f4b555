"""The notifier service: job state changes delivered to users' webhooks (Feishu, DingTalk, Slack, JSON)."""
