# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_leader_exec_global_optspecs
    string join \n l/lease= prefix= identity= ttl= renew-deadline= retry-period= s/kill-signal= k/kill-after= wait-timeout= n/no-wait max-holders= recampaign contain= hold-at-least= allow-long-hold occurrence= if-unfinished= occurrence-retention= max-runtime= splay= health-cmd= health-interval= health-timeout= health-retries= http= metrics-file= endpoints= connect-timeout= cacert= cert= key= user= password-file= v/verbose q/quiet log-format= h/help V/version
end

function __fish_leader_exec_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_leader_exec_global_optspecs) -- $cmd 2>/dev/null
    or return 0
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_leader_exec_using_subcommand
    set -l cmd (__fish_leader_exec_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c leader-exec -n "__fish_leader_exec_needs_command" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l identity -d 'Stored with this instance\'s claim and shown by `status` (on etcd also by `etcdctl elect -l`) [default: <hostname>:<pid>]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l ttl -d 'Lease duration on the store (etcd lease, PostgreSQL lease row, ZooKeeper session), in whole seconds' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l renew-deadline -d 'Step down when no renewal succeeded for this long, counted from the renewal\'s send time' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l retry-period -d 'Interval between renewals (and the time one renewal may take before it is retried)' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s s -l kill-signal -d 'First signal sent to the command\'s process group on step-down (name or number)' -r -f -a "TERM\t''
INT\t''
HUP\t''
QUIT\t''
USR1\t''
USR2\t''
KILL\t''"
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s k -l kill-after -d 'Grace period after the first signal before SIGKILL goes to the whole process group' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l wait-timeout -d 'Give up campaigning after this long (exit 124) [default: wait forever]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l max-holders -d 'Let up to N instances run COMMAND at once (1-1000): a fleet-wide concurrency limit' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l contain -d 'How the command\'s processes are contained, so that stopping it reaches all of them' -r -f -a "group\t'Its own process group (the default)'
cgroup\t'A cgroup v2 of its own as well, killed with cgroup.kill'
pidns\t'A PID namespace of its own as well, whose init is the supervisor'"
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l hold-at-least -d 'Keep the lease until this long after acquiring it, even if the command ends sooner' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l occurrence -d 'Run COMMAND at most once for this occurrence, e.g. "statements:$(date +%F)"' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l if-unfinished -d 'What to do with an occurrence an earlier leader started and left without an outcome' -r -f -a "rerun\t'Run it again; the command gets the old leader\'s token in LEADER_PREVIOUS_TOKEN'
skip\t'Treat it as done: exit 0 without running'
fail\t'Refuse to run and exit 76, so a human (or an alert) decides'"
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l occurrence-retention -d 'How long occurrence records are kept in the store (any of them); afterwards they are deleted, or treated as absent until they are' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l max-runtime -d 'Stop the command this long after it started, as on TERM, and exit 79 [default: no bound]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l splay -d 'Wait a random time in [0, DUR) before the first campaign [default: 0]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l health-cmd -d 'A health check, run with /bin/sh -c; an unhealthy instance neither stands in line nor leads' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l health-interval -d 'Time between health checks' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l health-timeout -d 'How long one health check may run before it is killed and counted as failed' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l health-retries -d 'Failed health checks in a row that make the instance unhealthy (1-100)' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l http -d 'Serve GET /metrics, /leader and /healthz over HTTP on this address [default: off]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l metrics-file -d 'Write the metrics and this run\'s outcome to FILE (node_exporter textfile format)' -r -F
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s n -l no-wait -d 'Try once: exit 124 at once if another instance leads or is ahead in line'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l recampaign -d 'After leadership is lost, stop the command and campaign again instead of exiting 75'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -l allow-long-hold -d 'Accept a --hold-at-least longer than a day'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -s V -l version -d 'Print version'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "status" -d 'Show the current leader: identity, token, key, lease time left, number of candidates'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "watch" -d 'Print one line (or JSON object) per leadership change, until interrupted'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "check" -d 'Exit 0 if TOKEN is the current leader\'s token, 1 if it is not (stale), 125 on error'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "resign" -d 'Hand leadership over to the next instance in line, from any host, without an overlap'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "hold" -d 'Take a slot and keep it with no process behind it (rolling reboots), printing its token'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "release" -d 'Give back the slot `leader-exec hold` took under --identity (default: the host name)'
complete -c leader-exec -n "__fish_leader_exec_needs_command" -a "completion" -d 'Print the completion script for SHELL (the one installed under share/ for it)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l json -d 'Print one JSON object with stable field names instead of text'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -l all -d 'List every lease under --prefix (leader, token, TTL left, candidates, unfinished occurrences), sorted by name; --lease is not needed (and ignored). Exit 0 once read'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -l json -d 'Print one JSON object per line instead of text'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand watch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l token -d 'The token to check, usually "$LEADER_TOKEN"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l token -d 'Resign only if T is still the current leader\'s token (as `status` shows it); with --max-holders above 1, resign the holder with token T' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l timeout -d 'How long to wait for the leader to hand over before giving up (exit 124). Default: the leader\'s --kill-after + 2 x its --retry-period + 5 s, as it records them in the store (4s + 2 x 2s + 5s = 13s for a leader that records none). The request expires then' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -l force -d 'Do not ask: delete the leader\'s claim at once (fenced on its token). This can overlap: the next instance may start its command before the old leader has stopped its own (on etcd and ZooKeeper the old leader SIGKILLs its group as soon as it sees the claim gone; on PostgreSQL it learns at its next renewal, up to --retry-period later; a frozen leader not until it runs again). For a leader that does not answer a plain `resign`'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand resign" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l for -d 'The bound of a slot nobody releases (a host that never came back): on etcd it ends DUR after it was taken; on PostgreSQL and ZooKeeper once a waiting instance has seen it unchanged for DUR. At least 1s' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l identity -d 'Who holds the slot, as `status` shows it and `release` names it [default: <hostname>]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l max-holders -d 'How many slots the lease has (1-1000); the same N as every run-form instance of the lease' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l wait-timeout -d 'Give up waiting in line after this long (exit 124) [default: wait forever]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l ttl -d 'The lease of this instance\'s place in line while it waits, as the run form\'s --ttl' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -s n -l no-wait -d 'Try once: exit 124 at once if every slot is held'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l identity -d 'Whose slot to give back [default: <hostname>]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -s l -l lease -d 'Name of the election; every instance that should exclude the others uses the same name' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l prefix -d 'Key prefix; the election\'s keys live under PREFIX + NAME + "/"' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l endpoints -d 'etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq\'s form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l connect-timeout -d 'How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline)' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l cacert -d 'CA certificate to verify the store\'s certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l cert -d 'Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l key -d 'Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l user -d 'The store\'s user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]' -r -f
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l password-file -d 'Read the store\'s password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]' -r -F
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -l log-format -d 'Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG\'s target=level,... form that overrides -v/-q' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line'"
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -s v -l verbose -d 'More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -s q -l quiet -d 'Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line)'
complete -c leader-exec -n "__fish_leader_exec_using_subcommand completion" -s h -l help -d 'Print help (see more with \'--help\')'
