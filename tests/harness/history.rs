//! Reading a history file back ([`Record`], complete lines only) and checking it: one command at a
//! time, tokens rising.

use std::collections::HashSet;

/// The complete lines of `text`, a file that other processes may still be appending to. Every
/// writer appends a record as one `write` of a whole line ending in `\n`, but a reader may catch
/// such a write half done (the first bytes of a line visible before the rest, as when a line
/// crosses a page): a last line without its `\n` is no record yet, and is left to the next read.
pub fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
}

/// The records of a history file's text, complete lines only (see [`complete_lines`]): a record
/// cut short would carry a wrong last field, a time, and so count as an overlap that never was.
pub fn parse_history(text: &str) -> Vec<Record> {
    complete_lines(text).filter_map(Record::parse).collect()
}

/// One line of history: `KIND NAME FIELD...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: String,
    pub name: String,
    pub fields: Vec<String>,
}

impl Record {
    fn parse(line: &str) -> Option<Record> {
        let mut words = line.split_whitespace();
        Some(Record {
            kind: words.next()?.to_owned(),
            name: words.next()?.to_owned(),
            fields: words.map(str::to_owned).collect(),
        })
    }

    /// For `start`: the token.
    pub fn token(&self) -> i64 {
        self.fields[0].parse().unwrap()
    }

    /// For `start`: the pid.
    pub fn pid(&self) -> i32 {
        self.fields[1].parse().unwrap()
    }

    /// The record's timestamp (its last field), wall-clock nanoseconds.
    pub fn time(&self) -> u128 {
        self.fields.last().unwrap().parse().unwrap()
    }
}

/// Checks the safety property on a history: no job started while a process of an earlier job
/// was alive (each job checks this itself at its start, see `Scratch::job`), no job started before
/// an earlier job's recorded end, and tokens strictly increase in start order.
pub fn assert_one_at_a_time(history: &[Record]) {
    let overlaps: Vec<_> = history.iter().filter(|r| r.kind == "overlap").collect();
    assert!(
        overlaps.is_empty(),
        "jobs overlapped: {overlaps:?}\n{history:#?}"
    );
    let mut last_token = 0;
    let mut last_end = 0;
    let mut seen = HashSet::new();
    for record in history {
        match record.kind.as_str() {
            "start" => {
                assert!(
                    record.token() > last_token,
                    "token {} after {last_token}: {history:#?}",
                    record.token()
                );
                assert!(
                    record.time() > last_end,
                    "{} started before an earlier end: {history:#?}",
                    record.name
                );
                assert!(
                    seen.insert(record.name.clone()),
                    "{} started twice",
                    record.name
                );
                last_token = record.token();
            }
            "end" => {
                assert!(
                    seen.contains(&record.name),
                    "{} ended without a start",
                    record.name
                );
                last_end = last_end.max(record.time());
            }
            _ => {}
        }
    }
}
