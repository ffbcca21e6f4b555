"""The Kubernetes test bed: etcd, kube-apiservers and KWOK built from Go modules and run locally.

``python -m rlark_devinfra.k8s build|up|down|status``; pytest fixtures in ``fixtures.py``.
"""
