#! expect: url_credentials@1
export DATABASE_URL=postgres://trainer:pa55w0rd@db.internal:5432/runs
