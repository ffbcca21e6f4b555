"""The object-storage formats: an S3 credential document and an objectStorage mount's bucket URL (ADR 0024)."""

from __future__ import annotations

import json

import pytest
from rlark_contracts.storage import (
    DEFAULT_REGION,
    BucketLocation,
    BucketUrlError,
    CredentialsError,
    S3Credentials,
    parse_bucket_url,
    parse_s3_credentials,
)

pytestmark = pytest.mark.unit

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
DOCUMENT = {
    "accessKeyId": "AKIAIOSFODNN7EXAMPLE",
    "secretAccessKey": SECRET,
    "endpoint": "http://127.0.0.1:8333/",
    "region": "eu-west-1",
}


def test_a_credential_document_parses_with_its_secret_hidden_and_round_trips() -> None:
    creds = parse_s3_credentials(json.dumps(DOCUMENT))
    assert (creds.access_key_id, creds.endpoint, creds.region) == (
        "AKIAIOSFODNN7EXAMPLE",
        "http://127.0.0.1:8333",
        "eu-west-1",
    )
    assert creds.secret_access_key.get_secret_value() == SECRET
    assert SECRET not in repr(creds)
    assert SECRET not in str(creds)
    assert parse_s3_credentials(creds.document()) == creds


def test_the_region_defaults_to_us_east_1() -> None:
    document = {k: v for k, v in DOCUMENT.items() if k != "region"}
    assert parse_s3_credentials(json.dumps(document).encode()).region == DEFAULT_REGION


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"accessKeyId": None}, "accessKeyId: missing"),
        ({"secretAccessKey": ""}, "secretAccessKey: must be 1-256 printable characters without spaces"),
        ({"accessKeyId": 12}, "accessKeyId: must be a string"),
        (
            {"secretAccessKey": SECRET + "\nendpoint = http://evil"},
            "secretAccessKey: must be 1-256 printable",
        ),
        ({"accessKeyId": "AKIA EXAMPLE"}, "accessKeyId: must be 1-128 printable characters"),
        ({"endpoint": "ftp://example.org"}, "endpoint: must be an http:// or https:// URL"),
        ({"endpoint": f"http://AKIA:{SECRET}@example.org"}, "endpoint: must not carry credentials"),
        ({"endpoint": "http://example.org/bucket"}, "endpoint: must name only the server"),
        ({"endpoint": "http://example.org:99999"}, "endpoint: has an invalid port"),
        ({"region": "EU West"}, "region: must be lowercase letters"),
        ({"sessionToken": SECRET}, "sessionToken: not a field of an S3 credential document"),
    ],
)
def test_a_broken_document_names_the_field_and_never_the_value(change: dict[str, object], said: str) -> None:
    document = {**DOCUMENT, **change}
    document = {k: v for k, v in document.items() if v is not None}
    with pytest.raises(CredentialsError) as caught:
        parse_s3_credentials(json.dumps(document))
    assert said in str(caught.value)
    assert SECRET not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize("raw", ["", "[]", "not json", b"\xff\xfe", '"a string"'])
def test_what_is_not_a_json_object_is_refused(raw: str | bytes) -> None:
    with pytest.raises(CredentialsError, match="not a JSON object"):
        parse_s3_credentials(raw)


def test_the_model_can_be_built_by_field_name_too() -> None:
    creds = S3Credentials(access_key_id="k", secret_access_key="s", endpoint="https://s3.example.org")  # type: ignore[arg-type]
    assert json.loads(creds.document())["secretAccessKey"] == "s"


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("s3://ckpt", BucketLocation("ckpt")),
        ("s3://ckpt/", BucketLocation("ckpt")),
        ("s3://my.bucket-1/runs/exp 1/", BucketLocation("my.bucket-1", "runs/exp 1")),
    ],
)
def test_a_bucket_url_names_a_bucket_and_a_prefix(url: str, location: BucketLocation) -> None:
    assert parse_bucket_url(url) == location
    assert location.url() == url.rstrip("/")
    assert parse_bucket_url(location.url()) == location


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("gs://bucket", "must start with s3://"),
        ("bucket/prefix", "must start with s3://"),
        ("s3://Bucket", "the bucket must be"),
        ("s3://ab", "the bucket must be"),
        ("s3://a..b", "the bucket must be"),
        ("s3://192.168.1.10", "the bucket must be"),
        ("s3://b-1/a//c", "empty, '.' or '..'"),
        ("s3://b-1/a/../c", "empty, '.' or '..'"),
        ("s3://b-1/a\nb", "control characters"),
    ],
)
def test_a_bad_bucket_url_says_which_rule_it_breaks(url: str, rule: str) -> None:
    with pytest.raises(BucketUrlError, match=rule.replace(".", r"\.").replace("(", r"\(")):
        parse_bucket_url(url)
