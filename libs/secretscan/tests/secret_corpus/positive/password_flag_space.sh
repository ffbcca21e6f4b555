#! expect: password@1
mysql --user root --password s3cr3t-P4ss -e 'select 1'
