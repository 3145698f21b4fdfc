//! Records a leader keeps beside the election: which leader ran an occurrence and how it ended
//! ([`occurrence`]), and the leader's published state that `status` and `watch` show
//! ([`published`]).

pub mod occurrence;
pub mod published;
