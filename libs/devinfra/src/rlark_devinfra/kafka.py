"""A real single-node Apache Kafka broker (KRaft) assembled from Maven Central jars.

The jars are resolved once per machine with Maven into a versioned cache directory and reused by every
checkout; the broker's data, config and log live under this checkout's state directory. The broker is
ready when a client gets cluster metadata, not when its port opens.

Security as in production (ADR 0004): clients authenticate with SASL/SCRAM-SHA-512 and the
StandardAuthorizer refuses what no ACL allows. The admin principal (``rlark-admin``, a super user, also the
broker's own identity) gets its SCRAM credential when the storage is formatted; the controller listener
takes SASL/PLAIN for the same principal (KRaft controllers cannot read SCRAM credentials from the metadata
they serve). Its password is in the broker's config, which only the broker's owner can read.

The broker's data is its owner's alone: every event — every user's job spec, run scripts included — lies in
its segment files. Its home and data directories are mode 700 and the broker (and the formatting of its
storage) runs with umask 077, so what it writes is 600 (ADR 0007's amendment, issue 31).

Logins last ``REAUTH_MS`` (``connections.max.reauth.ms``): aiokafka does not re-authenticate (KIP-368),
so the broker closes each connection once its login is that old and the client logs in again, which a
principal whose password changed meanwhile (a rotated agent credential) cannot. The same minute as in
``docker-compose.yml`` and ``deploy/``: a test whose services run longer sees their connections end and
the services carry on.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rlark_platform.messaging.access import ADMIN_PRINCIPAL, KafkaAccess

from rlark_devinfra.paths import cache_dir, state_dir
from rlark_devinfra.process import free_port, read_pid, stop_process_group, wait_until

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.25.3"
CACHE_KEY = f"kafka-{KAFKA_VERSION}-log4j-{LOG4J_VERSION}-v1"
REAUTH_MS = 60_000
"""How long a login lasts before the broker ends the connection (as in compose and Kubernetes)."""
OWNER_ONLY = 0o700
BROKER_UMASK = 0o077


@dataclass(frozen=True)
class KafkaStatus:
    running: bool
    bootstrap: str | None
    pid: int | None
    log_file: Path


def _home() -> Path:
    # Not ``kafka``: a broker started before authentication was on may still run there for another session.
    return state_dir() / "kafka-sasl"


def _pid_file() -> Path:
    return _home() / "kafka.pid"


def _port_file() -> Path:
    return _home() / "port"


def _log_file() -> Path:
    return _home() / "kafka.log"


def _libs_target() -> Path:
    return cache_dir() / CACHE_KEY / "libs"


def jars_ready() -> bool:
    """Whether the broker's jars are assembled (nothing is downloaded)."""
    return (_libs_target().parent / "complete").exists()


def libs_dir() -> Path:
    """The broker's jars, resolved with Maven on first use (about 60 MB; ~1 min with a fast registry).

    Maven's local repository lives in the same cache (``cache_dir()/m2``), so an empty ``RLARK_CACHE_DIR``
    really starts from nothing, as on a new machine.
    """
    target = _libs_target()
    if jars_ready():
        return target
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed once to assemble the Kafka broker from Maven Central")
    print(
        f"[kafka] assembling Apache Kafka {KAFKA_VERSION} from Maven Central jars (once per machine)…",
        file=sys.stderr,
        flush=True,
    )
    staging = target.parent / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pom = target.parent / "pom.xml"
    pom.write_text(resources.files("rlark_devinfra").joinpath("assets/kafka-pom.xml").read_text())
    subprocess.run(
        [
            "mvn",
            "-B",
            "-q",
            "-f",
            str(pom),
            f"-Dmaven.repo.local={cache_dir() / 'm2'}",
            "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ],
        check=True,
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target.parent / "complete").write_text(KAFKA_VERSION)
    return target


def _jaas(module: str, password: str, *, plain_users: bool = False) -> str:
    users = f' user_{ADMIN_PRINCIPAL}="{password}"' if plain_users else ""
    return f'{module} required username="{ADMIN_PRINCIPAL}" password="{password}"{users};'


def _write_config(port: int, controller_port: int, admin_password: str) -> Path:
    home = _home()
    log4j = home / "log4j2.properties"
    log4j.write_text(
        "status = warn\n"
        "appender.console.type = Console\n"
        "appender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.stdout.ref = STDOUT\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = WARN\n"
        "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
        "logger.server.name = kafka.server.KafkaServer\nlogger.server.level = INFO\n"
        "logger.broker.name = kafka.server.BrokerServer\nlogger.broker.level = INFO\n"
        "logger.org.name = org.apache.kafka\nlogger.org.level = WARN\n"
    )
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.scram.ScramLoginModule", admin_password
        ),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule", admin_password, plain_users=True
        ),
        "connections.max.reauth.ms": str(REAUTH_MS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_PRINCIPAL}",
        "allow.everyone.if.no.acl.found": "false",
        "log.dirs": str(home / "data"),
        "num.partitions": "3",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "log.flush.interval.messages": "9223372036854775807",
    }
    config = home / "server.properties"
    config.touch(mode=0o600)
    config.chmod(0o600)
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return config


def admin_access(bootstrap: str, admin_password: str) -> KafkaAccess:
    """The super user's client options (provisioning, tests' readers)."""
    return KafkaAccess(bootstrap, ADMIN_PRINCIPAL, admin_password)


def _broker_answers(access: KafkaAccess) -> bool:
    import asyncio
    import logging

    from aiokafka.admin import AIOKafkaAdminClient

    # While the broker boots, aiokafka logs every refused connection; the timeout error says enough.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    async def check() -> bool:
        admin = AIOKafkaAdminClient(**access.client_options(), request_timeout_ms=3000)
        try:
            await admin.start()
            metadata = await admin.describe_cluster()
            return bool(metadata.get("brokers"))
        finally:
            await admin.close()

    return asyncio.run(check())


def status() -> KafkaStatus:
    pid = read_pid(_pid_file())
    bootstrap = None
    if pid is not None and _port_file().exists():
        bootstrap = f"127.0.0.1:{_port_file().read_text().strip()}"
    return KafkaStatus(running=pid is not None, bootstrap=bootstrap, pid=pid, log_file=_log_file())


def start(admin_password: str, timeout_s: float = 120.0) -> KafkaStatus:
    """Start the broker unless it already runs (idempotent); return once metadata answers.

    ``admin_password`` is the admin principal's: it is written into new storage and the broker's config.
    """
    if not admin_password:
        raise ValueError("admin_password: the Kafka admin principal needs a password")
    home = _home()
    _make_private(home / "data")  # a broker an earlier version started is closed too
    current = status()
    if current.running and current.bootstrap and _port_open(current.bootstrap):
        return current
    if current.pid is not None:
        stop_process_group(current.pid)
    libs = libs_dir()
    port, controller_port = free_port(), free_port()
    config = _write_config(port, controller_port, admin_password)
    java = shutil.which("java") or "java"
    classpath = f"{libs}/*"
    # The cluster id is fixed when the data directory is first formatted; restarts must reuse it.
    cluster_id = _formatted_cluster_id(home / "data") or new_cluster_id()
    formatted = subprocess.run(
        [
            java,
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",
            "--config",
            str(config),
            "--ignore-formatted",
            "--add-scram",
            f"SCRAM-SHA-512=[name={ADMIN_PRINCIPAL},password={admin_password}]",
        ],
        capture_output=True,
        text=True,
        umask=BROKER_UMASK,
    )
    if formatted.returncode != 0:
        raise RuntimeError(
            f"formatting the Kafka data directory {home / 'data'} failed "
            f"(exit {formatted.returncode}):\n{formatted.stdout}{formatted.stderr}"
        )
    log = _log_file().open("ab")
    process = subprocess.Popen(
        [
            java,
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(config),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=home,
        umask=BROKER_UMASK,
    )
    _pid_file().write_text(str(process.pid))
    _port_file().write_text(str(port))
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _broker_answers(admin_access(bootstrap, admin_password)),
            timeout_s,
            f"Kafka at {bootstrap}",
            0.5,
        )
    except TimeoutError as exc:
        stop_process_group(process.pid)
        tail = _log_file().read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{exc}; broker log tail:\n{tail}") from exc
    return status()


def _make_private(data: Path) -> None:
    """The data directory and its parent (the broker's home: config, log) exist, mode 700 (also when an
    earlier version made them readable by others)."""
    data.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
    for path in (data.parent, data):
        path.chmod(OWNER_ONLY)


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes in URL-safe base64, never starting with a dash.

    Kafka's own ``Uuid.randomUuid`` avoids a leading dash for the same reason: a command line
    reads ``-Jit…`` as an option (1 run in 64 failed before this rule).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _formatted_cluster_id(data: Path) -> str | None:
    """The cluster id a formatted data directory already carries (restarts must reuse it)."""
    try:
        lines = (data / "meta.properties").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id" and value.strip():
            return value.strip()
    return None


def _raise_open_files_limit() -> None:
    """Every partition costs the broker a few open files; test runs create thousands of partitions."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for wanted in (262144, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), max(hard, wanted)))
            return
        except (ValueError, OSError):
            continue


def _port_open(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


def stop() -> None:
    """Stop the broker by its PID file (SIGTERM, then SIGKILL after a grace); a no-op when not running."""
    pid = read_pid(_pid_file())
    if pid is not None:
        stop_process_group(pid, grace_s=20)
    _pid_file().unlink(missing_ok=True)


def reset_data() -> None:
    """Stop and delete the broker's data (topics, offsets)."""
    stop()
    shutil.rmtree(_home() / "data", ignore_errors=True)
    _make_private(_home() / "data")
