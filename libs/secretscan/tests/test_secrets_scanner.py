"""Secret scanner decisions: names, values, placeholders, positions and precedence."""

from __future__ import annotations

import pytest
from rlark_secretscan import (
    SecretFinding,
    SecretKind,
    classify_name,
    describe_kind,
    scan_assignment,
    scan_mapping,
    scan_text,
)

HIGH_ENTROPY = "Zq8vN2pL5xR7tY1wK4mB9cD3"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("PASSWORD", SecretKind.PASSWORD),
        ("db_password", SecretKind.PASSWORD),
        ("dbPassword", SecretKind.PASSWORD),
        ("PGPASSWORD", SecretKind.PASSWORD),
        ("--ssh-passphrase", SecretKind.PASSWORD),
        ("DB_PASS", SecretKind.PASSWORD),
        ("MYSQL_PWD", SecretKind.PASSWORD),
        ("pass", SecretKind.PASSWORD),
        ("AWS_SECRET_ACCESS_KEY", SecretKind.AWS_SECRET_ACCESS_KEY),
        ("MINIO_SECRET_KEY", SecretKind.OBJECT_STORAGE_SECRET),
        ("S3_SECRET", SecretKind.OBJECT_STORAGE_SECRET),
        ("OSS_ACCESS_KEY_SECRET", SecretKind.OBJECT_STORAGE_SECRET),
        ("accessKeySecret", SecretKind.GENERIC_SECRET),
        ("AZURE_STORAGE_ACCOUNT_KEY", SecretKind.AZURE_STORAGE_KEY),
        ("CLIENT_SECRET", SecretKind.GENERIC_SECRET),
        ("WANDB_API_KEY", SecretKind.GENERIC_SECRET),
        ("apiKey", SecretKind.GENERIC_SECRET),
        ("private_key", SecretKind.GENERIC_SECRET),
        ("HF_TOKEN", SecretKind.GENERIC_TOKEN),
        ("hfToken", SecretKind.GENERIC_TOKEN),
        ("GITHUB_ACCESS_TOKEN", SecretKind.GENERIC_TOKEN),
    ],
)
def test_secret_looking_names(name: str, kind: SecretKind) -> None:
    assert classify_name(name) is kind


@pytest.mark.parametrize(
    "name",
    [
        "PASSWORD_FILE",
        "password-file",
        "passwordFile",
        "--password-stdin",
        "TOKEN_PATH",
        "HF_TOKEN_FILE",
        "secretRef",
        "SECRET_NAME",
        "AWS_ACCESS_KEY_ID",
        "MINIO_ACCESS_KEY",
        "tokenizer",
        "tokenizer_model",
        "max_tokens",
        "secretary",
        "PWD",
        "OLDPWD",
        "PASS_THROUGH",
        "MAX_TOKEN_LENGTH",
        "ssh_public_key",
        "NCCL_DEBUG",
    ],
)
def test_names_that_do_not_hold_secrets(name: str) -> None:
    assert classify_name(name) is None


@pytest.mark.parametrize(
    "value",
    [
        "$DB_PASSWORD",
        "${DB_PASSWORD}",
        "${oc.env:DB_PASSWORD}",
        "$(cat /run/secrets/db)",
        "`cat /run/secrets/db`",
        "{{ .Values.password }}",
        "<redacted>",
        "<your-password>",
        "***",
        "xxx",
        "XXXXXXXX",
        "...",
        "redacted",
        "none",
        "null",
        "true",
        "",
        "/run/secrets/db",
        "os.environ[",
        "args.password",
    ],
)
def test_references_paths_code_and_placeholders_are_not_passwords(value: str) -> None:
    assert scan_assignment("DB_PASSWORD", value, "f") == []


@pytest.mark.parametrize("value", ["changeme", "password", "123456", "x", "hunter2", "p@ss w0rd"])
def test_weak_or_default_passwords_are_still_passwords(value: str) -> None:
    assert scan_assignment("DB_PASSWORD", value, "env.DB_PASSWORD") == [
        SecretFinding(SecretKind.PASSWORD, "env.DB_PASSWORD", 1, 1)
    ]


def test_token_names_need_a_long_high_entropy_literal() -> None:
    assert scan_assignment("API_TOKEN", HIGH_ENTROPY, "f") == [
        SecretFinding(SecretKind.GENERIC_TOKEN, "f", 1, 1)
    ]
    for value in ["abc", "<|endoftext|>", "aaaaaaaaaaaaaaaaaaaaaaaa", "not a token at all, words"]:
        assert scan_assignment("PAD_TOKEN", value, "f") == []


def test_specific_token_shape_wins_over_the_generic_name_rule() -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    assert scan_assignment("HF_TOKEN", token, "f") == [SecretFinding(SecretKind.HUGGINGFACE_TOKEN, "f", 1, 1)]
    assert scan_text(f"export HF_TOKEN={token}\n", "f") == [
        SecretFinding(SecretKind.HUGGINGFACE_TOKEN, "f", 1, 17)
    ]


def test_scan_mapping_judges_each_entry_by_name_and_value() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "DB_PASSWORD": "changeme",
        "HF_TOKEN": "$(cat /run/secrets/hf)",
        "REMOTE": "https://bot:s3cr3t@git.example.com/x",
    }
    assert scan_mapping(env, "spec.tasks[0].env") == [
        SecretFinding(SecretKind.PASSWORD, "spec.tasks[0].env.DB_PASSWORD", 1, 1),
        SecretFinding(SecretKind.URL_CREDENTIALS, "spec.tasks[0].env.REMOTE", 1, 13),
    ]


def test_findings_come_in_text_order_with_line_and_column_of_the_value() -> None:
    text = "a=1\n  password: hunter2\nexport CLIENT_SECRET='abc'\n"
    assert scan_text(text, "s") == [
        SecretFinding(SecretKind.PASSWORD, "s", 2, 13),
        SecretFinding(SecretKind.GENERIC_SECRET, "s", 3, 23),
    ]


def test_comparisons_are_not_assignments() -> None:
    assert scan_text('if [ "$PASSWORD" == "x" ]; then echo; fi\n', "s") == []
    assert scan_text("if password != expected:\n", "s") == []


def test_prose_mentioning_passwords_is_not_an_assignment() -> None:
    assert scan_text('echo "Enter the password: then press enter"\n', "s") == []


def test_a_pem_block_is_one_finding_at_its_begin_line() -> None:
    text = "x\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    assert scan_text(text, "s") == [SecretFinding(SecretKind.PRIVATE_KEY, "s", 2, 1)]


def test_public_keys_and_jwt_lookalikes_are_not_secrets() -> None:
    assert scan_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 me@host\n", "s") == []
    # Three dotted base64url parts whose first part is not JSON are not a JWT.
    assert scan_text("eyJub3QganNvbg.eyJhYmNkZWZnaA.c2lnbmF0dXJl\n", "s") == []


def test_openai_prefix_needs_a_random_looking_body() -> None:
    assert scan_text("model=sk-this-is-not-a-real-key-at-all\n", "s") == []


def test_messages_describe_the_kind_and_position_only() -> None:
    finding = SecretFinding(SecretKind.GITHUB_TOKEN, "spec.runScript", 3, 9)
    assert finding.message.startswith("a GitHub token was found in spec.runScript (line 3, column 9)")
    assert all(describe_kind(kind) for kind in SecretKind)


def test_a_finding_spans_the_secret_in_the_scanned_text_so_its_holder_can_redact_it() -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    text = (
        f"a=1\nexport HF_TOKEN={token} # x\n  password: hunter2\nurl=https://bot:s3cr3t@git.example.com/x\n"
    )
    assert [text[slice(*f.span)] for f in scan_text(text, "s")] == [token, "hunter2", "s3cr3t"]
    assert [("changeme"[slice(*f.span)]) for f in scan_assignment("DB_PASSWORD", "changeme", "f")] == [
        "changeme"
    ]
