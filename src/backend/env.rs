//! The backends' measurement and tuning knobs read from the environment at open: on/off
//! switches and counts. Each helper parses the variable's value (`parse_*`, testable without
//! touching the process environment) and refuses anything else with an error naming it, so a
//! mistyped knob never silently runs the default.

use crate::error::{Error, Result};

/// An on/off switch, on unless set to `0` / `off` (`1` / `on` / empty / unset: on; surrounding
/// space ignored; anything else an error).
pub(crate) fn switch_from_env(name: &str) -> Result<bool> {
    parse_switch(name, std::env::var(name).ok().as_deref())
}

/// [`switch_from_env`] on the variable `name`'s value `v` (`None`: unset).
pub(crate) fn parse_switch(name: &str, v: Option<&str>) -> Result<bool> {
    match v.map(str::trim) {
        None | Some("" | "1" | "on") => Ok(true),
        Some("0" | "off") => Ok(false),
        Some(v) => Err(Error::InvalidArgument(format!("{name}: `{v}` is not 0, 1, on or off"))),
    }
}

/// A count, `None` when unset or empty; 1..=max (surrounding space ignored), else an error.
pub(crate) fn count_from_env(name: &str, max: usize) -> Result<Option<usize>> {
    parse_count(name, std::env::var(name).ok().as_deref(), max)
}

/// [`count_from_env`] on the variable `name`'s value `v` (`None`: unset).
pub(crate) fn parse_count(name: &str, v: Option<&str>, max: usize) -> Result<Option<usize>> {
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
            _ => Err(Error::InvalidArgument(format!("{name}: `{v}` is not a count from 1 to {max}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_and_counts_parse_or_refuse() {
        for (v, on) in [
            (None, true),
            (Some(""), true),
            (Some(" 1 "), true),
            (Some("on"), true),
            (Some("0"), false),
            (Some("off"), false),
        ] {
            assert_eq!(parse_switch("S", v).unwrap(), on, "{v:?}");
        }
        assert!(parse_switch("S", Some("yes")).is_err());
        assert_eq!(parse_count("C", None, 8).unwrap(), None);
        assert_eq!(parse_count("C", Some(""), 8).unwrap(), None);
        assert_eq!(parse_count("C", Some(" 8"), 8).unwrap(), Some(8));
        assert!(parse_count("C", Some("9"), 8).is_err() && parse_count("C", Some("0"), 8).is_err());
    }
}
