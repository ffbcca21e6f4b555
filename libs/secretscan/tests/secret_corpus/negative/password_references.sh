#! expect: none
psql "host=db user=trainer password=$DB_PASSWORD"
mysql --password="${MYSQL_PASSWORD}" -e 'select 1'
export REDIS_PASSWORD=${REDIS_PASSWORD:-}
