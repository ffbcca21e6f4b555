#!/usr/bin/env bash
# RLark pod entrypoint (Kubernetes runtime). Shipped in the per-job ConfigMap beside bootstrap.sh.
#
# Kubernetes refreshes a mounted ConfigMap in place when it changes (within the kubelet's sync
# period, about a minute). The worker's public keys live in the per-worker ConfigMap, so a key
# rotation only has to update that ConfigMap: this loop notices the change and rewrites
# ~/.ssh/authorized_keys atomically (mode 600), as the bootstrap did at start. Nothing restarts,
# and the agent needs no `pods/exec` permission. Then the worker bootstrap runs as PID 1's child.
set -u

keys_src=${RLARK_AUTHORIZED_KEYS_FILE:-}
if [[ -n $keys_src ]]; then
  (
    # Stateless: compare what the file says with what is installed, so a change that lands
    # while the bootstrap is still installing the first keys is not missed.
    while sleep "${RLARK_KEYS_SYNC_S:-10}"; do
      [[ -r $keys_src ]] || continue
      mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh" || continue
      tmp="$HOME/.ssh/.authorized_keys.sync"
      # Public keys only: a line that looks like key material is dropped, never echoed.
      (umask 077 && grep -v -e 'PRIVATE KEY' -e '^[[:space:]]*$' "$keys_src" >"$tmp") || true
      # (bash only: `cmp` is not in every image)
      if [[ -f $HOME/.ssh/authorized_keys && "$(<"$tmp")" == "$(<"$HOME/.ssh/authorized_keys")" ]]; then
        rm -f "$tmp"
        continue
      fi
      chmod 600 "$tmp" && mv -f "$tmp" "$HOME/.ssh/authorized_keys" || continue
      printf '##rlark {"event":"keys_installed","count":%d}\n' "$(grep -c . "$HOME/.ssh/authorized_keys")"
    done
  ) &
fi

# A pod that runs as a non-root user (the default: runAsUser 1000, Pod Security "restricted") cannot read the
# image's host keys: the bootstrap then makes the worker a host key of its own in $HOME (the pod's emptyDir) and
# runs its sshd unprivileged, reading the mounted keys file the kubelet refreshes (bootstrap.sh, start_sshd).
exec bash "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
