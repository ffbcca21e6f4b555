"""The retry schedule, URL policy (SSRF) and registration checks."""

from __future__ import annotations

import ipaddress

import pytest
from rlark_notifier.domain import (
    Backoff,
    NotifierInputError,
    UrlPolicy,
    address_allowed,
    literal_address,
    validate_job_ids,
    validate_secret,
    validate_states,
    validate_url,
)


def test_backoff_doubles_up_to_its_cap_and_gives_up_after_max_attempts() -> None:
    backoff = Backoff(initial_s=2, max_s=60, max_attempts=7)
    assert backoff.schedule() == [2, 4, 8, 16, 32, 60]
    assert not backoff.gives_up_after(6)
    assert backoff.gives_up_after(7)
    with pytest.raises(ValueError, match="attempt"):
        backoff.delay_after(0)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T0/B0/x",
        "https://open.feishu.cn/open-apis/bot/v2/hook/abc",
        "https://oapi.dingtalk.com/robot/send?access_token=abc",
        "https://93.184.216.34:8443/hook",
    ],
)
def test_public_https_urls_are_accepted(url: str) -> None:
    assert validate_url(f"  {url} ", UrlPolicy()) == url


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://example.com/hook", "insecure_url"),
        ("ftp://example.com/hook", "invalid_url"),
        ("https://169.254.169.254/latest/meta-data", "forbidden_address"),
        ("https://[fe80::1]/x", "forbidden_address"),
        ("https://metadata.google.internal/computeMetadata/v1", "forbidden_address"),
        ("https://127.0.0.1/hook", "forbidden_address"),
        ("https://localhost/hook", "forbidden_address"),
        ("https://10.1.2.3/hook", "forbidden_address"),
        ("https://[::ffff:169.254.169.254]/x", "forbidden_address"),
        ("https://0.0.0.0/x", "forbidden_address"),
        ("https://user:pw@example.com/x", "credentials_in_url"),
        ("https:///nohost", "invalid_url"),
        ("", "invalid_url"),
    ],
)
def test_refused_urls_name_the_url_field(url: str, code: str) -> None:
    with pytest.raises(NotifierInputError) as refused:
        validate_url(url, UrlPolicy())
    assert (refused.value.code, refused.value.field) == (code, "url")
    assert "pw" not in refused.value.message


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.0x0.0.0x1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f.1.", "127.0.0.1"),
        ("１２７.０.０.１", "127.0.0.1"),
        ("127。0。0。1", "127.0.0.1"),
        ("０ｘ７ｆ０００００１", "127.0.0.1"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0", "0.0.0.0"),  # noqa: S104  # an address read, not bound
        ("0x", "0.0.0.0"),  # noqa: S104
        ("::ffff:7f00:1", "::ffff:7f00:1"),
        ("1.2.3.4", "1.2.3.4"),
    ],
)
def test_a_host_written_as_a_number_is_the_address_inet_aton_reads(host: str, address: str) -> None:
    assert literal_address(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host",
    ["example.com", "1.2.3.4.5", "256.1.1.1", "1.16777216", "08.0.0.1", "0xg", "1_0.0.0.1", "+1", "", "1..1"],
)
def test_a_host_that_is_no_inet_aton_address_is_a_name_to_resolve(host: str) -> None:
    assert literal_address(host) is None


@pytest.mark.parametrize(
    "host",
    [
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "１２７.０.０.１",
        "0xa9fea9fe",
        "０",
        "ｌｏｃａｌｈｏｓｔ",
        "10.1",
    ],
)
def test_every_numeric_and_full_width_spelling_of_a_refused_address_is_refused_at_registration(
    host: str,
) -> None:
    with pytest.raises(NotifierInputError) as refused:
        validate_url(f"https://{host}/hook", UrlPolicy())
    assert (refused.value.code, refused.value.field) == ("forbidden_address", "url")


def test_a_deployment_may_allow_http_and_private_receivers_but_never_link_local() -> None:
    policy = UrlPolicy(allow_http=True, allow_private=True)
    assert validate_url("http://127.0.0.1:9999/hook", policy) == "http://127.0.0.1:9999/hook"
    with pytest.raises(NotifierInputError):
        validate_url("http://169.254.169.254/", policy)
    assert address_allowed(ipaddress.ip_address("169.254.1.1"), policy)
    assert address_allowed(ipaddress.ip_address("10.0.0.1"), policy) is None
    assert address_allowed(ipaddress.ip_address("10.0.0.1"), UrlPolicy())


def test_states_must_be_job_states_and_are_kept_in_lifecycle_order() -> None:
    assert validate_states(["Succeeded", "Running", "Running"]) == ["Running", "Succeeded"]
    with pytest.raises(NotifierInputError) as refused:
        validate_states(["Running", "Done"])
    assert refused.value.field == "states[1]"


def test_job_filters_are_job_ids() -> None:
    assert validate_job_ids(["b", "a", "b"]) == ["a", "b"]
    with pytest.raises(NotifierInputError) as refused:
        validate_job_ids(["ok", "no spaces"])
    assert refused.value.field == "job_ids[1]"


def test_a_refused_secret_is_never_quoted() -> None:
    assert validate_secret("") is None
    with pytest.raises(NotifierInputError) as refused:
        validate_secret(" leading-space-secret")
    assert "leading-space-secret" not in refused.value.message
    assert refused.value.field == "secret"
