//! The leader floor: what a leading instance keeps — the renewal that proves the claim, the
//! supervisor that owns the command's process group, occurrence records and the leader's state
//! record that `status` shows.

pub mod contain;
pub mod lookup;
pub mod occurrence;
pub mod procfs;
pub mod published;
pub mod renewal;
pub mod supervisor;
pub mod timing;
pub mod title;
