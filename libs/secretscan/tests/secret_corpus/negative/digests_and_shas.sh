#! expect: none
docker pull registry.example.com/rlinf@sha256:{{hex64}}
git checkout {{hex40}}
