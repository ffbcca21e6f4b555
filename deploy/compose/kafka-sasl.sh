#!/bin/bash
# The compose file's Kafka broker with authentication and authorization (ADR 0004): SASL/SCRAM-SHA-512 on
# the client listener, SASL/PLAIN for the admin on the controller listener, the StandardAuthorizer denying
# whatever no ACL allows. The admin principal's SCRAM credential is added when the storage is formatted.
# connections.max.reauth.ms: a login lasts 60 s, then the broker ends the connection and the client logs
# in again, so an agent whose credential was rotated (its Kafka password changed) is cut off within it.
# Needs KAFKA_ADMIN_PASSWORD; the config it writes (with that password) is readable by the broker only.
# The data is the broker's alone too (every event, every user's job spec and scripts, lies in its segment
# files): its data directory is mode 700 and the broker inherits umask 077 (ADR 0007's amendment).
set -euo pipefail
: "${KAFKA_ADMIN_PASSWORD:?set RLARK_KAFKA_ADMIN_PASSWORD in .env}"
ADMIN=rlark-admin
CONFIG=/tmp/rlark-kafka/server.properties
mkdir -p /tmp/rlark-kafka && chmod 700 /tmp/rlark-kafka
chmod 700 /var/lib/kafka/data
umask 077
cat >"$CONFIG" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@kafka:9093
listeners=SASL_PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=SASL_PLAINTEXT://kafka:9092
inter.broker.listener.name=SASL_PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN" password="$KAFKA_ADMIN_PASSWORD";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$ADMIN" password="$KAFKA_ADMIN_PASSWORD" user_$ADMIN="$KAFKA_ADMIN_PASSWORD";
connections.max.reauth.ms=60000
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$ADMIN
allow.everyone.if.no.acl.found=false
auto.create.topics.enable=false
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPERTIES
cat >/tmp/rlark-kafka/admin.properties <<PROPERTIES
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN" password="$KAFKA_ADMIN_PASSWORD";
PROPERTIES
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  /opt/kafka/bin/kafka-storage.sh format --config "$CONFIG" --cluster-id "$(/opt/kafka/bin/kafka-storage.sh random-uuid)" \
    --add-scram "SCRAM-SHA-512=[name=$ADMIN,password=$KAFKA_ADMIN_PASSWORD]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$CONFIG"
