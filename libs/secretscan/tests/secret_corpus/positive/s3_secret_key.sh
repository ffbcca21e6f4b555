#! expect: object_storage_secret@1
export S3_SECRET_ACCESS_KEY={{aws_secret}}
