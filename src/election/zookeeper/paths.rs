//! Node names and paths: what ZooKeeper allows in a node name, an occurrence ID as one node name
//! and back, and the node path of a key the rest of the tool names.

use super::*;

/// Whether ZooKeeper accepts `c` in a node name (its `PathUtils.validatePath`).
pub(super) fn allowed(c: char) -> bool {
    !(c == '\0'
        || ('\u{1}'..='\u{1f}').contains(&c)
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || ('\u{e000}'..='\u{f8ff}').contains(&c)
        || ('\u{fff0}'..='\u{ffff}').contains(&c))
}

/// One occurrence ID as one node name (see the module comment of mod.rs).
pub fn encode_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for (i, c) in id.chars().enumerate() {
        if c == '%' || c == '/' || (i == 0 && c == '.') || !allowed(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`encode_name`], as bytes (a name some other client wrote may not decode to
/// UTF-8, and is shown escaped).
pub fn decode_name(name: &str) -> Vec<u8> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

impl ZooKeeper {
    /// The node path for a key the rest of the tool names (`PREFIX .occurrences/NAME/ID`,
    /// `PREFIX .leaders/NAME`), or for a listing prefix (`PREFIX .occurrences/` …, trailing '/').
    pub(super) fn path_of(&self, key: &str) -> String {
        let rest = key.strip_prefix(&self.prefix).unwrap_or(key);
        let mut parts = rest.splitn(3, '/');
        let mut path = self.base.clone();
        for (i, part) in (&mut parts).enumerate() {
            if part.is_empty() {
                break;
            }
            path.push('/');
            if i < 2 {
                path.push_str(part);
            } else {
                path.push_str(&encode_name(part));
            }
        }
        path
    }

    pub(super) fn parent(path: &str) -> &str {
        &path[..path.rfind('/').unwrap_or(0)]
    }
}
