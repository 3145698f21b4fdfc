//! Integration tests: every one starts its own etcd on free loopback ports and runs the real
//! leader-exec binary; facts are observed from outside (what children recorded, which pids are
//! alive, exit codes, what etcd holds).

mod harness;

mod ambiguous;
mod cron;
mod election;
mod exit_codes;
mod faults;
mod hostile;
mod input;
mod local_faults;
mod metrics;
mod operator;
mod rough_edges;
mod signals;
