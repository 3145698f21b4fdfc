//! Durations as every flag takes them: humantime text, bounded so that no arithmetic on them can
//! overflow.

use std::time::Duration;

/// The longest duration any flag accepts: 9,000,000,000 s (about 285 years), the longest lease
/// etcd grants (`MaxLeaseTTL`). Longer values are refused before anything else happens, so no
/// arithmetic on durations can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(9_000_000_000);

/// humantime durations: `500ms`, `15s`, `2m`, `1h 30m`; at most [`MAX_DURATION`], never negative.
///
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty: give a duration like 500ms, 15s or 2m".to_owned());
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "'{}' is negative: durations are 0 or more, like 500ms, 15s or 2m",
            text.escape_debug()
        ));
    }
    let duration = humantime::parse_duration(trimmed).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => format!(
            "'{}' is out of range: at most {}s (about 285 years, the longest lease etcd grants), in steps of 1ns",
            text.escape_debug(),
            MAX_DURATION.as_secs()
        ),
        e => format!(
            "'{}' is not a duration like 500ms, 15s or 2m ({e})",
            text.escape_debug()
        ),
    })?;
    if duration > MAX_DURATION {
        return Err(format!(
            "'{}' is too long: at most {}s (about 285 years, the longest lease etcd grants)",
            text.escape_debug(),
            MAX_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_humantime() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn durations_are_bounded_and_never_negative() {
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1ns"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse_duration("9000000000s"), Ok(MAX_DURATION));
        for text in [
            "9000000001s",
            "300years",
            "584000000000years",
            "18446744073709551615s",
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("at most 9000000000s"), "{text}: {err}");
        }
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration(" ").unwrap_err().contains("empty"));
    }
}
