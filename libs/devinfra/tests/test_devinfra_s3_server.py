"""The tests' S3 server (versitygw from its Go module, ADR 0024) is a real, authenticated one: objects go in and
come back (whole or uploaded in parts), anonymous and wrongly signed requests are refused, and keys made for one
bucket reach only that bucket."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from rlark_devinfra.pytest_plugin import S3Bucket
from rlark_devinfra.versitygw import S3Keys, S3Server

pytestmark = pytest.mark.integration


def _refusal(call: object) -> tuple[str, int]:
    assert callable(call)
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def test_an_object_written_with_a_bucket_s_keys_reads_back_the_same(s3_bucket: S3Bucket) -> None:
    s3 = s3_bucket.client()
    body = bytes(range(256)) * 4096  # 1 MiB, every byte value
    s3.put_object(Bucket=s3_bucket.name, Key="runs/exp-1/actor.pt", Body=body)
    got = s3.get_object(Bucket=s3_bucket.name, Key="runs/exp-1/actor.pt")
    assert got["Body"].read() == body
    listed = s3.list_objects_v2(Bucket=s3_bucket.name, Prefix="runs/")
    assert [o["Key"] for o in listed["Contents"]] == ["runs/exp-1/actor.pt"]


def test_an_object_uploaded_in_parts_reads_back_whole(s3_bucket: S3Bucket) -> None:
    """Multipart upload, as rclone and botocore's transfers do for large files."""
    s3, bucket, key = s3_bucket.client(), s3_bucket.name, "ckpt/big.bin"
    # Every part but the last at S3's 5 MiB minimum.
    parts = [b"\x01" * (5 << 20), b"\x02" * (5 << 20), b"tail"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = []
    for number, body in enumerate(parts, start=1):
        sent = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body)
        done.append({"PartNumber": number, "ETag": sent["ETag"]})
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done})
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"".join(parts)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_anonymous_and_wrongly_signed_requests_are_refused(s3_server: S3Server, s3_bucket: S3Bucket) -> None:
    s3_bucket.client().put_object(Bucket=s3_bucket.name, Key="secret.txt", Body=b"only for the owner")
    anonymous = s3_server.anonymous()
    assert _refusal(lambda: anonymous.get_object(Bucket=s3_bucket.name, Key="secret.txt"))[1] == 403
    assert _refusal(lambda: anonymous.put_object(Bucket=s3_bucket.name, Key="x", Body=b"x"))[1] == 403
    assert _refusal(lambda: anonymous.list_buckets())[1] == 403

    wrong_secret = s3_server.client(S3Keys(s3_bucket.keys.access_key_id, "not-the-secret-key-at-all"))
    unknown_key = s3_server.client(S3Keys("AKIANOBODYHASTHISKEY", s3_bucket.keys.secret_access_key))
    assert _refusal(lambda: wrong_secret.get_object(Bucket=s3_bucket.name, Key="secret.txt")) == (
        "SignatureDoesNotMatch",
        403,
    )
    assert _refusal(lambda: unknown_key.get_object(Bucket=s3_bucket.name, Key="secret.txt")) == (
        "InvalidAccessKeyId",
        403,
    )


def test_keys_made_for_one_bucket_cannot_touch_another(s3_server: S3Server) -> None:
    a, b = s3_server.create_bucket("a"), s3_server.create_bucket("b")
    try:
        keys_a = s3_server.bucket_keys(a)
        s3_server.client().put_object(Bucket=b, Key="theirs.txt", Body=b"bucket b's")
        as_a = s3_server.client(keys_a)
        as_a.put_object(Bucket=a, Key="mine.txt", Body=b"bucket a's")
        assert as_a.get_object(Bucket=a, Key="mine.txt")["Body"].read() == b"bucket a's"

        assert _refusal(lambda: as_a.get_object(Bucket=b, Key="theirs.txt")) == ("AccessDenied", 403)
        assert _refusal(lambda: as_a.put_object(Bucket=b, Key="planted.txt", Body=b"x")) == (
            "AccessDenied",
            403,
        )
        assert _refusal(lambda: as_a.list_objects_v2(Bucket=b))[1] == 403
        assert _refusal(lambda: as_a.delete_object(Bucket=b, Key="theirs.txt"))[1] == 403
        # Bucket b is as it was: its object, and nothing planted.
        listed = s3_server.client().list_objects_v2(Bucket=b)
        assert [o["Key"] for o in listed["Contents"]] == ["theirs.txt"]
    finally:
        s3_server.delete_bucket(a)
        s3_server.delete_bucket(b)
