#! expect: none
echo "$REGISTRY_PASSWORD" | docker login --username bot --password-stdin registry.example.com
