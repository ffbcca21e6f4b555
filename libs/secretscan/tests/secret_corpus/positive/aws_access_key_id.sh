#! expect: aws_access_key_id@2
set -euo pipefail
export AWS_ACCESS_KEY_ID={{aws_key_id}}
aws s3 ls s3://datasets/
