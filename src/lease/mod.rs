//! The lease layer: the renewal loop that proves the claim and its deadline ([`renewal`]), and
//! the four durations the safety argument is made of, with the inequalities between them that
//! validation checks ([`timing`]).

pub mod renewal;
pub mod timing;
