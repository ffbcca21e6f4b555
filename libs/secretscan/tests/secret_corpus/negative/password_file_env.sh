#! expect: none
export PASSWORD_FILE=/run/secrets/db-password
export POSTGRES_PASSWORD_FILE=/run/secrets/pg
