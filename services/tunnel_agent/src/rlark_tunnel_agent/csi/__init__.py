"""RLark's own CSI node plugin: buckets of Kubernetes workers' ``objectStorage`` mounts, mounted by rclone on
the node (ADR 0024). `proto`: the wire types; `node`: the requests and the mounts; `server`: gRPC and the
kubelet's plugin registration. Entry point: ``python -m rlark_tunnel_agent csi-node``."""
