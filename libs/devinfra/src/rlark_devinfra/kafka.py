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
import contextlib
import json
import os
import shutil
import signal
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


LOG4J = (
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


def broker_settings(
    *,
    node_id: int,
    host: str,
    port: int,
    controller_port: int,
    voters: str,
    data_dir: Path,
    admin_password: str,
    replication: int = 1,
) -> dict[str, str]:
    """One combined broker+controller's ``server.properties`` (ADR 0004's security, whatever the size).

    ``voters`` is ``controller.quorum.voters`` (``1@host:port,...``); ``replication`` sets the internal
    topics' and new topics' replication factor, and ``min.insync.replicas`` to a majority of it, so an
    acknowledged write survives one broker's loss once there are three.
    """
    min_isr = str(max(1, replication - 1))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://{host}:{port}",
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
        "log.dirs": str(data_dir),
        "num.partitions": "3",
        "default.replication.factor": str(replication),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "log.flush.interval.messages": "9223372036854775807",
    }


def _write_properties(home: Path, settings: dict[str, str]) -> Path:
    (home / "log4j2.properties").write_text(LOG4J)
    config = home / "server.properties"
    config.touch(mode=0o600)
    config.chmod(0o600)
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return config


def _write_config(port: int, controller_port: int, admin_password: str) -> Path:
    home = _home()
    settings = broker_settings(
        node_id=1,
        host="127.0.0.1",
        port=port,
        controller_port=controller_port,
        voters=f"1@127.0.0.1:{controller_port}",
        data_dir=home / "data",
        admin_password=admin_password,
    )
    return _write_properties(home, settings)


def _format_storage(config: Path, cluster_id: str, admin_password: str, data: Path) -> None:
    formatted = subprocess.run(
        [
            shutil.which("java") or "java",
            "-cp",
            f"{libs_dir()}/*",
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
            f"formatting the Kafka data directory {data} failed "
            f"(exit {formatted.returncode}):\n{formatted.stdout}{formatted.stderr}"
        )


def _spawn_broker(home: Path, config: Path, log_file: Path, heap: str = "768m") -> subprocess.Popen[bytes]:
    log = log_file.open("ab")
    return subprocess.Popen(
        [
            shutil.which("java") or "java",
            "-Xms256m",
            f"-Xmx{heap}",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            "-cp",
            f"{libs_dir()}/*",
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
    libs_dir()
    port, controller_port = free_port(), free_port()
    config = _write_config(port, controller_port, admin_password)
    # The cluster id is fixed when the data directory is first formatted; restarts must reuse it.
    cluster_id = _formatted_cluster_id(home / "data") or new_cluster_id()
    _format_storage(config, cluster_id, admin_password, home / "data")
    process = _spawn_broker(home, config, _log_file())
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


# --- three brokers ----------------------------------------------------------------------------------------


BROKERS = 3


@dataclass(frozen=True)
class BrokerStatus:
    node_id: int
    running: bool
    pid: int | None
    address: str
    log_file: Path


class KafkaCluster:
    """Three KRaft brokers (each also a controller voter) with SASL/SCRAM and ACLs: the "managed Kafka"
    that ``deploy/kubernetes`` expects (replication 3, ``min.insync.replicas`` 2), started by the project.

    The single broker above stays the rest of the suite's; this one is the deployment test bed's (ADR 0027).
    Brokers listen on ``host`` (an address the test bed's pods reach: the machine's own), on ports chosen
    at the first start and kept in ``ports.json`` so a broker killed and started again rejoins with the
    same identity and address. State under ``state_dir()/<name>/broker-<n>/``, owner-only like the single
    broker's. Not thread-safe; one owner per name.
    """

    def __init__(self, host: str, name: str = "kafka-cluster") -> None:
        self.host = host
        self.home = state_dir() / name

    def _broker_home(self, node_id: int) -> Path:
        return self.home / f"broker-{node_id}"

    def _ports(self) -> dict[str, list[int]]:
        """Client and controller ports per broker, kept while the host stays the same."""
        record = self.home / "ports.json"
        if record.exists():
            found = json.loads(record.read_text())
            if found.get("host") == self.host:
                return {"client": found["client"], "controller": found["controller"]}
        ports = {
            "client": [free_port() for _ in range(BROKERS)],
            "controller": [free_port() for _ in range(BROKERS)],
        }
        self.home.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
        record.write_text(json.dumps({"host": self.host, **ports}))
        return ports

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (what ``RLARK_KAFKA_BOOTSTRAP`` takes)."""
        return ",".join(f"{self.host}:{port}" for port in self._ports()["client"])

    def broker_status(self, node_id: int) -> BrokerStatus:
        directory = self._broker_home(node_id)
        port = self._ports()["client"][node_id - 1]
        return BrokerStatus(
            node_id,
            read_pid(directory / "kafka.pid") is not None,
            read_pid(directory / "kafka.pid"),
            f"{self.host}:{port}",
            directory / "kafka.log",
        )

    def start(self, admin_password: str, timeout_s: float = 180.0) -> str:
        """Start every broker not running (idempotent); return the bootstrap once all three are in the
        cluster's metadata."""
        if not admin_password:
            raise ValueError("admin_password: the Kafka admin principal needs a password")
        ports = self._ports()
        voters = ",".join(f"{n}@{self.host}:{ports['controller'][n - 1]}" for n in range(1, BROKERS + 1))
        cluster_id_file = self.home / "cluster-id"
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id())
        cluster_id = cluster_id_file.read_text().strip()
        for node_id in range(1, BROKERS + 1):
            self._start_broker(node_id, admin_password, voters, cluster_id)
        self.wait_ready(admin_password, timeout_s)
        return self.bootstrap

    def _start_broker(self, node_id: int, admin_password: str, voters: str, cluster_id: str) -> None:
        if self.broker_status(node_id).running:
            return
        directory = self._broker_home(node_id)
        _make_private(directory / "data")
        ports = self._ports()
        config = _write_properties(
            directory,
            broker_settings(
                node_id=node_id,
                host=self.host,
                port=ports["client"][node_id - 1],
                controller_port=ports["controller"][node_id - 1],
                voters=voters,
                data_dir=directory / "data",
                admin_password=admin_password,
                replication=BROKERS,
            ),
        )
        _format_storage(config, cluster_id, admin_password, directory / "data")
        process = _spawn_broker(directory, config, directory / "kafka.log", heap="512m")
        (directory / "kafka.pid").write_text(str(process.pid))

    def wait_ready(self, admin_password: str, timeout_s: float = 180.0) -> None:
        """Until the metadata any broker answers lists all three."""
        access = admin_access(self.bootstrap, admin_password)
        try:
            wait_until(lambda: _brokers_in_metadata(access) == BROKERS, timeout_s, "three Kafka brokers", 1.0)
        except TimeoutError as exc:
            tails = "".join(
                f"\n--- broker {n}:\n{self.broker_status(n).log_file.read_text(errors='replace')[-1500:]}"
                for n in range(1, BROKERS + 1)
                if self.broker_status(n).log_file.exists()
            )
            raise RuntimeError(f"{exc}{tails}") from exc

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one broker (a crash: no controlled shutdown)."""
        current = self.broker_status(node_id)
        if current.pid is not None:
            stop_process_group(current.pid, grace_s=0)

    def start_broker(self, node_id: int, admin_password: str) -> None:
        """Start one broker again with its data, ports and identity (after :meth:`kill_broker`)."""
        ports = self._ports()
        voters = ",".join(f"{n}@{self.host}:{ports['controller'][n - 1]}" for n in range(1, BROKERS + 1))
        self._start_broker(node_id, admin_password, voters, (self.home / "cluster-id").read_text().strip())

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop every broker side by side (SIGTERM, SIGKILL after ``grace_s``)."""
        pids = [p for n in range(1, BROKERS + 1) if (p := self.broker_status(n).pid) is not None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        for pid in pids:
            stop_process_group(pid, grace_s=grace_s)

    def reset(self) -> None:
        """Stop every broker at once and delete their data and identity."""
        self.stop(grace_s=0)
        shutil.rmtree(self.home, ignore_errors=True)


def _brokers_in_metadata(access: KafkaAccess) -> int:
    import asyncio
    import logging

    from aiokafka.admin import AIOKafkaAdminClient

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    async def check() -> int:
        admin = AIOKafkaAdminClient(**access.client_options(), request_timeout_ms=3000)
        try:
            await admin.start()
            metadata = await admin.describe_cluster()
            return len(metadata.get("brokers") or [])
        finally:
            await admin.close()

    return asyncio.run(check())
