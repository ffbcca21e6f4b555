#! expect: none
curl -fsSL https://example.com:8443/datasets/index.json
export DATABASE_URL=postgres://trainer:${PGPASSWORD}@db.internal:5432/runs
git clone git@github.com:example/rl-recipes.git
