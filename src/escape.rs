//! Making bytes read from the store safe to print on a terminal.
//!
//! Any client allowed to write under the prefix chooses the keys and values leader-exec reads
//! back (identities, occurrence records). Printed raw, an identity holding `ESC ] 0 ; … BEL`
//! retitles the operator's terminal, `ESC [ 2 J` clears it, `\r` or `\n` forges lines, and a
//! right-to-left override reorders what follows. Text output therefore shows such data through
//! [`escape`]; JSON output is escaped by the JSON encoder. Also [`edit_distance`], for the
//! did-you-mean hints of messages.

use std::fmt::Write as _;

/// Bytes as printable text: valid UTF-8 stays as it is, except
///
/// - control characters (C0 `U+0000`–`U+001F`, DEL `U+007F`, C1 `U+0080`–`U+009F`): `\n`, `\r`,
///   `\t` by name, the others as `\x1b` or `\u{85}`;
/// - bidirectional overrides and isolates (`U+202A`–`U+202E`, `U+2066`–`U+2069`): `\u{202e}`;
/// - the backslash itself: `\\`, so the output cannot be mistaken for an escape it isn't;
/// - bytes that are not valid UTF-8: `\xff`.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

/// [`escape`] for text that is already a `str`.
pub fn escape_str(text: &str) -> String {
    escape(text.as_bytes())
}

fn push_char(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0}'..='\u{1f}' | '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `text` quoted for a POSIX shell, so that a suggested command can be pasted as it is whatever
/// it holds. A quote inside becomes `'"'"'` rather than a backslash form: text logs show
/// backslashes escaped, and this form has none.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r#"'"'"'"#))
}

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_are_shell_quoted() {
        assert_eq!(shell_quote("/a/b"), "'/a/b'");
        assert_eq!(
            shell_quote("x'; rm -rf /; '"),
            r#"'x'"'"'; rm -rf /; '"'"''"#
        );
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(escape(b"host-a:4711"), "host-a:4711");
        assert_eq!(escape_str("Zürich 東京"), "Zürich 東京");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape(b"a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(escape(b"\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
        assert_eq!(escape(b"\x1b[2J\x00\x7f"), "\\x1b[2J\\x00\\x7f");
        assert_eq!(escape_str("a\u{85}b\u{9b}c"), "a\\u{85}b\\u{9b}c");
    }

    #[test]
    fn bidi_overrides_and_isolates_are_escaped() {
        assert_eq!(escape_str("a\u{202e}b"), "a\\u{202e}b");
        for c in ('\u{202a}'..='\u{202e}').chain('\u{2066}'..='\u{2069}') {
            let escaped = escape_str(&c.to_string());
            assert!(escaped.starts_with("\\u{"), "{c:?} -> {escaped}");
        }
        // Marks that do not override anything stay.
        assert_eq!(escape_str("\u{200e}"), "\u{200e}");
    }

    #[test]
    fn invalid_utf8_is_shown_as_bytes() {
        assert_eq!(
            escape(b"/leader-exec/x/\xff\xfe"),
            "/leader-exec/x/\\xff\\xfe"
        );
        // A truncated sequence, then valid text.
        assert_eq!(escape(b"\xe2\x82ok"), "\\xe2\\x82ok");
    }

    #[test]
    fn backslashes_are_doubled() {
        assert_eq!(escape(b"a\\x1b"), "a\\\\x1b");
    }

    #[test]
    fn nothing_printable_is_left_unescaped() {
        let all: Vec<u8> = (0..=255u8).collect();
        let escaped = escape(&all);
        assert!(
            !escaped
                .chars()
                .any(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{escaped}"
        );
    }
}
