"""The gateway's pure rules: account names and passwords, credentials, who may call what, which events
a caller may see, login throttling, and how a change is named in the audit log. No I/O here."""
