//! Unit tests of the ZooKeeper layout: node names, line order, places, tokens, records, ACLs.

use super::latch::{Mark, marked, sort_key};
use super::paths::encode_name;
use super::records::{unexpired, with_expiry};
use super::session::{CREATOR_ALL_ANYONE_READ, open_to_everyone};
use super::*;

#[test]
fn a_held_slots_bound_lives_beside_the_election() {
    assert_eq!(
        held::held_path("/leader-exec/reboot", "_c_x-latch-0000000001"),
        "/leader-exec/.held/reboot/_c_x-latch-0000000001"
    );
    // Not a child of the election node: Curator would take it for a candidate.
    assert!(!held::held_path("/p/a", "n").starts_with("/p/a/"));
}

#[test]
fn ids_become_one_node_name_and_back() {
    for id in [
        "statements:2026-11-29",
        "a/b",
        ".hidden",
        "..",
        "50%",
        "x\u{e000}y",
    ] {
        let name = encode_name(id);
        assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
        assert!(name.chars().all(allowed), "{name}");
        assert_eq!(decode_name(&name), id.as_bytes(), "{id}");
    }
    assert_eq!(encode_name("a/b"), "a%2Fb");
}

#[test]
fn candidates_sort_as_curator_sorts_them() {
    let line = in_line(vec![
        "_c_bbbb-latch-0000000010".into(),
        "_c_aaaa-latch-0000000002".into(),
        "_c_cccc-latch-0000000007".into(),
    ]);
    assert_eq!(
        line,
        [
            "_c_aaaa-latch-0000000002",
            "_c_cccc-latch-0000000007",
            "_c_bbbb-latch-0000000010"
        ]
    );
}

#[test]
fn one_holder_names_its_node_as_curator_does_and_more_record_n() {
    let id = "0b4c3b2a-1111-4222-8333-444455556666";
    assert_eq!(candidate_name(id, 1), format!("_c_{id}-latch-"));
    assert_eq!(candidate_name(id, 2), format!("_c_{id}-holders-2-latch-"));
    for n in [1, 2, 3, 1000] {
        let name = format!("{}0000000012", candidate_name(id, n));
        assert_eq!(max_holders_of(&name), n, "{name}");
        assert_eq!(sort_key(&name), "0000000012");
    }
    // Without a marker, or with one that is not a number from 1 to 1000: 1.
    for name in [
        "latch-0000000001",
        "_c_x-latch-0000000001",
        "_c_x-holders-0-latch-0000000001",
        "_c_x-holders-1001-latch-0000000001",
        "_c_x-holders--2-latch-0000000001",
        "_c_x-holders-2x-latch-0000000001",
        "_c_x-holders-2latch-0000000001",
        "holders-2-latch-0000000001",
        "anything",
    ] {
        assert_eq!(max_holders_of(name), 1, "{name}");
    }
}

fn line(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn the_first_n_hold_and_a_different_n_ahead_is_a_mismatch() {
    let two = line(&[
        "_c_a-holders-2-latch-0000000001",
        "_c_b-holders-2-latch-0000000002",
        "_c_c-holders-2-latch-0000000003",
        "_c_d-holders-3-latch-0000000004",
        "_c_e-holders-2-latch-0000000005",
    ]);
    assert_eq!(place_in(&two, &two[0], 2), Place::Holds);
    assert_eq!(place_in(&two, &two[1], 2), Place::Holds);
    assert_eq!(place_in(&two, &two[2], 2), Place::Waits(2));
    assert_eq!(place_in(&two, &two[3], 3), Place::Mismatch(2));
    // Behind a mismatched newcomer that has not left yet.
    assert_eq!(place_in(&two, &two[4], 2), Place::Mismatch(3));
    assert_eq!(
        place_in(&two, "_c_z-holders-2-latch-0000000009", 2),
        Place::Gone
    );
    // Candidates behind are not compared.
    assert_eq!(place_in(&two, &two[0], 1), Place::Holds);
    let one = line(&["_c_a-latch-0000000001", "latch-0000000002"]);
    assert_eq!(place_in(&one, &one[0], 1), Place::Holds);
    assert_eq!(place_in(&one, &one[1], 1), Place::Waits(1));
    assert_eq!(place_in(&one, &one[1], 2), Place::Mismatch(1));
    assert_eq!(holders_in(&one), (1, 1));
    assert_eq!(holders_in(&two), (2, 2));
    assert_eq!(holders_in(&two[..1]), (2, 1));
    assert_eq!(holders_in(&[]), (1, 0));
    // A mismatched node among the first N does not hold, nor anyone behind it.
    let mixed = line(&[
        "_c_a-holders-3-latch-0000000001",
        "_c_b-holders-2-latch-0000000002",
        "_c_c-holders-3-latch-0000000003",
    ]);
    assert_eq!(holders_in(&mixed), (3, 1));
}

#[test]
fn the_token_is_the_mark_with_one_holder_and_the_touch_with_more() {
    let stat = zk::Stat {
        czxid: 10,
        mzxid: 15,
        pzxid: 10,
        ctime: 0,
        mtime: 0,
        version: 1,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 0,
        num_children: 0,
    };
    // N = 1: the mark's zxid once the mark names the node; before (or for Curator's
    // node, which never marks) the czxid.
    let mark = |node: &str, zxid| Mark {
        node: node.as_bytes().to_vec(),
        zxid,
    };
    let one = "_c_a-latch-0000000001";
    assert_eq!(token_of(one, &stat, None), 10);
    assert_eq!(token_of(one, &stat, Some(&mark(one, 29))), 29);
    assert_eq!(
        token_of(one, &stat, Some(&mark("_c_b-latch-0000000002", 29))),
        10
    );
    // A mark older than the node cannot be its own.
    assert_eq!(token_of(one, &stat, Some(&mark(one, 9))), 10);
    // Provisional exactly while the czxid stands in for the token.
    assert!(marked(one, &stat, Some(&mark(one, 29))));
    assert!(!marked(one, &stat, Some(&mark(one, 9))));
    assert!(!marked(
        one,
        &stat,
        Some(&mark("_c_b-latch-0000000002", 29))
    ));
    assert!(!marked(one, &stat, None));
    let two = "_c_a-holders-2-latch-0000000001";
    assert_eq!(token_of(two, &stat, None), 15);
    assert_eq!(token_of(two, &stat, Some(&mark(two, 29))), 15);
    assert_eq!(marker_path("/leader-exec/job"), "/leader-exec/.tokens/job");
    assert_eq!(marker_path("/job"), "/.tokens/job");
}

#[test]
fn listed_records_expire_by_the_readers_clock() {
    let live = with_expiry(b"42", Duration::from_secs(60));
    assert_eq!(unexpired(live).as_deref(), Some(&b"42"[..]));
    let dead = format!("{EXPIRES}1\n{{}}").into_bytes();
    assert_eq!(unexpired(dead), None);
    assert_eq!(unexpired(b"raw".to_vec()).as_deref(), Some(&b"raw"[..]));
}

#[test]
fn only_acls_that_let_everyone_write_are_open() {
    assert!(open_to_everyone(&Acls::anyone_all()));
    assert!(!open_to_everyone(&CREATOR_ALL_ANYONE_READ));
    assert!(!open_to_everyone(&Acls::anyone_read()));
    assert!(!open_to_everyone(&Acls::creator_all()));
    let create_only = Acl::new(Permission::CREATE, zk::AuthId::anyone());
    assert!(open_to_everyone(&[create_only]));
}

#[test]
fn protection_ids_look_like_uuids() {
    let id = protection_id();
    assert_eq!(id.len(), 36);
    assert_eq!(id.matches('-').count(), 4);
    assert_ne!(id, protection_id());
}
