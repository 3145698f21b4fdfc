//! Endpoints as they may be shown: without any password.
//!
//! A password can sit in several parts of an endpoint (`user:password@`, a `password=` query
//! parameter, a libpq `key=value` string), and an endpoint is shown in many places: messages
//! and logs, `status`, the connection log, metrics, and the command's environment
//! (`LEADER_EXEC_ENDPOINTS`). Every one of them goes through [`redact_password`].

/// An endpoint as it may be shown — in messages, logs, `status`, metrics and the command's
/// environment — with every password left out: the one in `user:password@` (what stands between
/// the first `:` and the last `@` of the authority, wherever a parser might end it), every query
/// parameter whose name (percent-decoded, any case) holds `password` (libpq's `password`,
/// `sslpassword`) or is `pass`, `passwd` or `pwd`, and the same keys in a libpq `key=value`
/// connection string. The one function every shown endpoint goes through.
pub fn redact_password(endpoint: &str) -> String {
    match endpoint.find("://") {
        Some(i) => format!(
            "{}{}",
            &endpoint[..i + 3],
            redact_url_rest(&endpoint[i + 3..])
        ),
        None if is_key_values(endpoint) => redact_key_values(endpoint),
        None => redact_url_rest(endpoint),
    }
}

/// Whether `text` reads as libpq's `key=value` form: it starts with a keyword (letters, digits,
/// `_`) and `=`. libpq's own rule is "not a URI, and holds an `=`"; a keyword first is what
/// tells `host=db1 password=a?b` (a password holding `?`) from an endpoint without a scheme
/// with a query, `etcd:2379?password=…`, whose text before the `=` is no keyword.
fn is_key_values(text: &str) -> bool {
    let text = text.trim_start();
    let keyword = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(text, |end| &text[..end]);
    !keyword.is_empty() && text[keyword.len()..].trim_start().starts_with('=')
}

/// [`redact_password`] of each endpoint, joined with commas.
pub fn shown_endpoints(endpoints: &[String]) -> String {
    endpoints
        .iter()
        .map(|e| redact_password(e))
        .collect::<Vec<_>>()
        .join(",")
}

fn is_password_key(key: &str) -> bool {
    let key = percent_decode(key).trim().to_ascii_lowercase();
    key.contains("password") || matches!(key.as_str(), "pass" | "passwd" | "pwd")
}

/// `[user[:password]@]hosts[/path][?query]` without the password parts.
fn redact_url_rest(rest: &str) -> String {
    // tokio-postgres ends the user info at the first '@', libpq at the last one before the
    // path: cut at the last '@' before the first '/' or '?' that follows the first '@', so
    // that neither reading leaves part of a password in what is shown.
    let (user, after) = match rest.find('@') {
        Some(first) => {
            let end = rest[first..]
                .find(['/', '?'])
                .map_or(rest.len(), |i| first + i);
            let last = rest[..end].rfind('@').unwrap_or(first);
            let userinfo = &rest[..last];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            (format!("{user}@"), &rest[last + 1..])
        }
        None => (String::new(), rest),
    };
    let Some((base, query)) = after.split_once('?') else {
        return format!("{user}{after}");
    };
    let mut kept = Vec::new();
    let mut in_password = false;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((key, _)) => {
                in_password = is_password_key(key);
                if !in_password {
                    kept.push(pair);
                }
            }
            // A bare word right after a password parameter may be the rest of a password
            // that held a '&'.
            None if in_password => {}
            None => kept.push(pair),
        }
    }
    if kept.is_empty() {
        format!("{user}{base}")
    } else {
        format!("{user}{base}?{}", kept.join("&"))
    }
}

/// libpq's `host=db1 password='a b' dbname=ops` without the password's pair.
fn redact_key_values(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            out.push(key);
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            value.push('\'');
            while let Some(c) = chars.next() {
                value.push(c);
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    _ => {}
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(c);
                if c == '\\' {
                    value.extend(chars.next());
                }
            }
        }
        if !is_password_key(&key) {
            // A value may itself be a connection string (libpq's `dbname` may hold a URL or
            // `key=value` pairs), with a password of its own.
            let value = match value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(inner) if inner.contains("://") || inner.contains('=') => {
                    format!("'{}'", redact_password(inner))
                }
                None if value.contains("://") || value.contains('=') => redact_password(&value),
                _ => value,
            };
            out.push(format!("{key}={value}"));
        }
    }
    out.join(" ")
}

/// `%XX` sequences decoded (URL query values: passwords, file paths).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown_in_any_form() {
        let cases = [
            // user:password@ in every scheme, and without one.
            (
                "postgres://jobs:hunter2@db1:5432/ops",
                "postgres://jobs@db1:5432/ops",
            ),
            (
                "postgresql://jobs:hunter2@db1,db2/ops",
                "postgresql://jobs@db1,db2/ops",
            ),
            ("POSTGRES://jobs:hunter2@db1/ops", "POSTGRES://jobs@db1/ops"),
            ("https://root:hunter2@etcd:2379", "https://root@etcd:2379"),
            ("http://root:hunter2@etcd:2379", "http://root@etcd:2379"),
            ("root:hunter2@etcd:2379", "root@etcd:2379"),
            (
                "zk://digest:hunter2@zk1:2181/jobs",
                "zk://digest@zk1:2181/jobs",
            ),
            // A password holding '@', '/', '?' or ':' (unencoded) or encoded characters.
            (
                "postgres://jobs:hun@ter2@db1/ops",
                "postgres://jobs@db1/ops",
            ),
            (
                "postgres://jobs:hun/ter2@db1/ops",
                "postgres://jobs@db1/ops",
            ),
            (
                "postgres://jobs:hun?ter2@db1/ops",
                "postgres://jobs@db1/ops",
            ),
            (
                "postgres://jobs:hun:ter2@db1/ops",
                "postgres://jobs@db1/ops",
            ),
            (
                "postgres://jobs:hun%40ter2@db1/ops",
                "postgres://jobs@db1/ops",
            ),
            // A query parameter: any case, percent-encoded names, sslpassword, anywhere.
            ("postgres://db1/ops?password=hunter2", "postgres://db1/ops"),
            (
                "postgres://db1/ops?sslmode=require&password=hunter2&connect_timeout=3",
                "postgres://db1/ops?sslmode=require&connect_timeout=3",
            ),
            ("postgres://db1/ops?PassWord=hunter2", "postgres://db1/ops"),
            (
                "postgres://db1/ops?pass%77ord=hunter2",
                "postgres://db1/ops",
            ),
            (
                "postgres://db1/ops?%70assword=hunter2",
                "postgres://db1/ops",
            ),
            (
                "postgres://db1/ops?sslpassword=hunter2",
                "postgres://db1/ops",
            ),
            ("postgres://db1/ops?password=hun&ter2", "postgres://db1/ops"),
            (
                "postgres://u:hunter2@db1/ops?password=hunter2",
                "postgres://u@db1/ops",
            ),
            ("http://etcd:2379/?pwd=hunter2", "http://etcd:2379/"),
            ("zk://zk1:2181?password=hunter2", "zk://zk1:2181"),
            // libpq key=value connection strings.
            (
                "host=db1 password=hunter2 dbname=ops",
                "host=db1 dbname=ops",
            ),
            (
                "host=db1 PASSWORD = 'hun ter2' dbname=ops",
                "host=db1 dbname=ops",
            ),
            ("host=db1 password='hun\\'ter2'", "host=db1"),
            // A password holding '?' (no URL for all its '?'), '@' or ':'.
            (
                "host=db1 password=hun?ter2 dbname=ops",
                "host=db1 dbname=ops",
            ),
            ("password='hun ter2?x' host=db1", "host=db1"),
            ("host=db1 password=u:hun@ter2", "host=db1"),
            // A connection string inside a value.
            (
                "dbname='postgres://u:hunter2@db1/ops' host=db1",
                "dbname='postgres://u@db1/ops' host=db1",
            ),
            ("host=db1?password=hunter2", "host=db1"),
            // No keyword before the '=': an endpoint without a scheme, with a query.
            ("etcd:2379?password=hunter2", "etcd:2379"),
            ("etcd1/?password=hunter2&x=1", "etcd1/?x=1"),
            // Nothing to hide.
            (
                "postgresql://db1,db2/ops?sslmode=require",
                "postgresql://db1,db2/ops?sslmode=require",
            ),
            ("http://127.0.0.1:2379", "http://127.0.0.1:2379"),
            ("zk://a:2181,b:2181/jobs", "zk://a:2181,b:2181/jobs"),
        ];
        for (url, shown) in cases {
            let redacted = redact_password(url);
            assert_eq!(redacted, shown, "{url}");
            assert!(
                !redacted.contains("hunter2") && !redacted.contains("ter2"),
                "{url}"
            );
            // Redacting twice changes nothing.
            assert_eq!(redact_password(&redacted), redacted, "{url}");
        }
        assert_eq!(
            shown_endpoints(&[
                "http://a:2379".into(),
                "http://b:2379/?password=hunter2".into()
            ]),
            "http://a:2379,http://b:2379/"
        );
    }
}
