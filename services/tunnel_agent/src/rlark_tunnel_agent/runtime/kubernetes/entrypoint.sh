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

# A pod that runs as a non-root user (the default: runAsUser 1000, Pod Security "restricted") cannot
# read the image's host keys, so the worker's sshd runs as that user (on the contract's unprivileged
# port) with a host key of its own, made here in $HOME (the pod's emptyDir): the bootstrap's
# unprivileged sshd mode (RLARK_SSH_HOST_KEY), reading the mounted keys file the kubelet refreshes.
if [[ $(id -u) != 0 && -z ${RLARK_SSH_HOST_KEY:-} ]] && command -v ssh-keygen >/dev/null 2>&1; then
  host_key="$HOME/.ssh/ssh_host_ed25519_key"
  if mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh" &&
    { [[ -f $host_key ]] || ssh-keygen -q -t ed25519 -N '' -C "rlark-worker-host" -f "$host_key" </dev/null >/dev/null; }; then
    export RLARK_SSH_HOST_KEY=$host_key
  fi
fi

exec bash "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
