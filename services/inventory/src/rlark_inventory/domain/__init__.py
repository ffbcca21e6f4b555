"""The inventory's pure rules: names, CIDRs, labels and selectors, credentials, node state and health.

Nothing here does I/O; the repository, handlers and adapters around it do.
"""
