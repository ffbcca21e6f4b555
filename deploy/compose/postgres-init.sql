-- One database per service: services never read each other's tables.
CREATE DATABASE rlark_gateway;
CREATE DATABASE rlark_inventory;
CREATE DATABASE rlark_keys;
CREATE DATABASE rlark_netdomain;
CREATE DATABASE rlark_notifier;
CREATE DATABASE rlark_scheduler;
