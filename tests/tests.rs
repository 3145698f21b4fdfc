//! Integration tests: every one starts its own store (etcd, or every store of the store list,
//! `tests/stores.rs`, for the tests that run against every store) on free loopback ports and runs
//! the real
//! leader-exec binary; facts are observed from outside (what children recorded, which pids are
//! alive, exit codes, what the store holds).

mod harness;
#[macro_use]
mod stores;

/// The store-independent tests: each runs once per store of the one list (`tests/stores.rs`:
/// `etcd::NAME`, `postgres::NAME`, `zookeeper::NAME`, `mysql::NAME`, `pgbouncer::NAME`,
/// `postgres_hostile::NAME`).
/// One list; a test joins it by taking `<S: Store>` instead of `#[test]`. An entry marked
/// `[full]` belongs to the full tier (`#[ignore]`d: `cargo test --locked -- --ignored` runs it,
/// as CI does after the README's command; docs/development.md, "Two tiers").
macro_rules! store_independent {
    ($($([$tier:ident])? $module:ident :: $test:ident),* $(,)?) => {
        with_stores! { store_independent_modules! { $($([$tier])? $module::$test),* } }
    };
}

/// One module per store, each with every test of the list.
macro_rules! store_independent_modules {
    ($tests:tt $($store:ident : $ty:ident [$($chaos:tt)*] [$($bench:tt)*];)*) => {
        $( store_independent_module! { $store $ty $tests } )*
    };
}

macro_rules! store_independent_module {
    ($store:ident $ty:ident { $($([$tier:ident])? $module:ident :: $test:ident),* }) => {
        mod $store {
            $(
                #[test]
                $( #[ignore = concat!(stringify!($tier), " tier: cargo test --locked -- --ignored")] )?
                fn $test() { crate::$module::$test::<crate::harness::$ty>(); }
            )*
        }
    };
}

store_independent! {
    // Exclusive leadership, strictly increasing tokens, handover.
    election::two_instances_take_turns,
    election::three_instances_take_turns_with_increasing_tokens,
    election::the_next_instance_starts_right_after_the_command_exits,
    // --no-wait and --wait-timeout.
    election::no_wait_and_wait_timeout_exit_124_and_leave_no_key,
    // Exit codes.
    exit_codes::the_commands_exit_status_is_passed_on,
    exit_codes::a_missing_command_is_127_and_a_non_executable_one_126,
    // The leader cut off or black-holed by the TCP proxy; the store restarted within the deadline.
    faults::a_leader_cut_off_from_the_store_stops_its_command_before_the_next_one_starts,
    faults::a_leader_behind_a_black_hole_sigkills_a_term_ignoring_group_in_time,
    faults::a_store_restart_shorter_than_the_deadline_leaves_the_command_alone,
    // A leader paused past the TTL: SIGKILL, not a grace, once it resumes.
    faults::a_leader_paused_past_the_ttl_sigkills_its_group_when_it_resumes,
    // leader-exec SIGKILLed with a grandchild.
    signals::killing_leader_exec_kills_the_whole_group,
    // --contain: a daemon that left the group, with each mode; TERM with cgroup; leader-exec and
    // its supervisor SIGKILLed together with pidns.
    contain::with_cgroup_a_daemonized_grandchild_is_dead_before_the_next_holder_starts,
    contain::with_group_a_daemonized_grandchild_survives_as_documented,
    contain::with_cgroup_term_kills_a_daemonized_grandchild_before_leader_exec_exits,
    contain::with_pidns_a_daemonized_grandchild_is_dead_before_the_next_holder_starts,
    contain::with_pidns_leader_exec_and_its_supervisor_killed_together_leave_nothing_running,
    contain::with_cgroup_a_lost_leadership_kills_a_daemonized_grandchild,
    contain::with_pidns_a_lost_leadership_kills_a_daemonized_grandchild,
    // status, check, watch.
    operator::status_shows_the_leader_or_exits_3,
    operator::check_tells_current_from_stale_tokens,
    operator::watch_reports_each_change_and_survives_a_store_restart,
    status_all::status_all_json_shows_since_command_and_hold_until_as_status_does,
    rough_edges::resign_moves_leadership_only_from_the_named_token,
    // resign is a handover; a frozen leader is named, --force takes over.
    handover::resign_hands_over_only_after_the_whole_old_group_is_gone,
    handover::resign_names_a_frozen_leader_and_force_takes_over,
    handover::resign_with_recampaign_sends_the_leader_to_the_back_of_the_line,
    handover::resign_reaches_a_leader_that_waited_in_line_and_then_the_next,
    handover::resign_ends_a_hold_at_least,
    // An occurrence runs once.
    cron::six_staggered_hosts_run_an_occurrence_once,
    cron::an_unfinished_occurrence_is_refused_with_a_hint_that_works,
    // Bad input.
    input::malformed_flags_are_one_line_and_125,
    // An unreachable store at start: bounded, named, ended early by a refusal.
    reach::an_unreachable_store_fails_within_the_connect_timeout,
    reach::unreachable_stores_are_named_the_same_way_by_every_subcommand,
    // The harness counts the leader and every waiter in line.
    claims::claims_count_the_leader_and_every_waiter,
    // --max-holders: N at once and never more, rising tokens, mismatches refused.
    holders::two_hold_at_once_the_third_waits_and_tokens_rise,
    holders::a_different_max_holders_exits_125_naming_both_values_and_leaves_nothing,
    holders::status_and_check_know_every_holder,
    holders::a_holder_cut_off_from_the_store_stops_before_a_waiter_takes_its_place,
    holders::forty_waiters_behind_two_holders_all_hold_in_turn,
    [full] holders::two_hundred_waiters_behind_two_holders_all_hold_in_turn,
    holders::a_store_restart_leaves_both_holders_holding_and_the_waiter_waiting,
    holders::a_holder_killed_with_its_wrapper_is_gone_before_a_waiter_holds,
    holders::a_late_first_look_after_a_change_of_n_leads_with_a_higher_token,
    // The operator subcommands with several holders: resign, watch, status --all, --no-wait,
    // --hold-at-least and --recampaign.
    holders_ops::resign_with_several_holders_hands_over_only_the_holder_it_names,
    holders_ops::watch_reports_each_change_of_the_holder_set,
    holders_ops::status_all_lists_every_holder,
    holders_ops::a_waiter_with_no_wait_exits_124_naming_the_holders,
    holders_ops::hold_at_least_and_recampaign_with_several_holders,
    holders_ops::resign_ends_one_holders_hold_at_least,
    holders_ops::resign_names_a_frozen_holder_and_force_removes_it_alone,
    holders_ops::watch_with_several_holders_survives_a_store_restart,
    // hold / release: slots held with no process behind them (rolling reboots).
    hold::two_hosts_hold_a_third_waits_and_release_lets_it_in,
    hold::an_expired_bound_lets_the_waiter_in_after_dur_and_not_before,
    hold::held_slots_and_run_form_holders_never_exceed_n,
    hold::a_store_restart_leaves_a_held_slot_held,
    hold::with_two_slots_the_shorter_bound_lets_the_waiter_in,
    hold::release_after_the_bound_frees_a_slot_that_still_blocks,
    hold::metrics_show_a_held_slot_until_it_is_released,
    // --max-runtime and --splay.
    limits::max_runtime_stops_a_term_ignoring_group_and_frees_the_lease,
    limits::a_command_that_ends_before_max_runtime_is_unaffected,
    limits::term_during_splay_exits_at_once_and_leaves_the_store_untouched,
    limits::splay_delays_each_start_by_a_different_amount_below_the_bound,
    // --health-cmd.
    health::an_unhealthy_instance_never_stands_in_line_and_a_failing_leader_hands_over,
    health::a_hanging_check_does_not_delay_the_step_down_when_the_store_is_cut_off,
    health::status_shows_the_leaders_health,
}

// The store-independent list's modules, and the store-neutral tests that need one store (etcd,
// the quickest to start) or none.
mod claims;
mod contain;
mod cron;
mod docs;
mod election;
mod exit_codes;
mod faults;
mod floors;
mod handover;
mod health;
mod hints;
mod history_checks;
mod hold;
mod holders;
mod holders_metrics;
mod holders_ops;
mod hostile;
mod input;
mod limits;
mod local_faults;
mod log_filter;
mod metrics;
mod operator;
mod reach;
mod rough_edges;
mod security;
mod security_files;
mod signals;
mod status_all;

// One folder per store for what only that store has: `etcd_only::…`, `postgres_only::…`,
// `mysql_only::…`, `pgbouncer_only::…`, `zookeeper_only::…` (not `etcd::…`: those are the list's on etcd).
#[path = "etcd/mod.rs"]
mod etcd_only;
#[path = "mysql/mod.rs"]
mod mysql_only;
#[path = "pgbouncer/mod.rs"]
mod pgbouncer_only;
#[path = "postgres/mod.rs"]
mod postgres_only;
#[path = "zookeeper/mod.rs"]
mod zookeeper_only;
