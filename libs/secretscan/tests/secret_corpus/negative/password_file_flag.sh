#! expect: none
./sync.sh --user bot --password-file /run/secrets/registry
