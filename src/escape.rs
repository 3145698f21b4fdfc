//! Text from the store (identities, keys, record fields) is written by any client with access to
//! the prefix. Before it reaches a terminal or a text log, characters that could move the cursor,
//! retitle or clear the terminal, start a new (forged) line or reorder text are shown escaped.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a terminal as it is: C0 controls (newline and tab included), DEL,
/// C1 controls, and the bidirectional overrides, embeddings, isolates and marks.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// `text` with every unsafe character written as `\xNN` (below U+0100) or `\u{NNNN}`.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_untouched() {
        assert!(matches!(for_terminal("host-1:42 ok é"), Cow::Borrowed(_)));
    }

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(for_terminal("a\x1b]0;x\x07b"), "a\\x1b]0;x\\x07b");
        assert_eq!(
            for_terminal("\nleader: forged\r"),
            "\\x0aleader: forged\\x0d"
        );
        assert_eq!(for_terminal("\x1b[2J"), "\\x1b[2J");
        assert_eq!(for_terminal("\u{9b}\u{7f}"), "\\x9b\\x7f");
        assert_eq!(for_terminal("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(for_terminal("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }
}
