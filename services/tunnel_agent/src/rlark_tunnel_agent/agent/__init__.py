"""The tunnel-agent's control loop: session with the control plane, reports out, desired state in."""
