//! Kubernetes label selectors: parsing the string form and matching labels, as the API server does.
//!
//! The grammar is the API server's: comma-separated requirements, each one of
//! `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)` or
//! `key notin (v1,v2)`. Keys and values are checked as Kubernetes checks label
//! keys and values, so a selector accepted here is accepted by a real cluster.

use std::collections::BTreeMap;
use std::fmt;

/// The longest selector string accepted, in bytes.
pub const MAX_SELECTOR_LEN: usize = 4096;

/// An object's labels, as a selector reads them.
pub trait Labels {
    /// The value of label `key`, if the object has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A parse error, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    selector: String,
    reason: String,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`, `key==value`: the label is present with this value.
    Equals(String, String),
    /// `key!=value`: the label is absent or has another value.
    NotEquals(String, String),
    /// `key in (a,b)`: the label is present with one of the values.
    In(String, Vec<String>),
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn(String, Vec<String>),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    DoesNotExist(String),
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    #[must_use]
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        let one_of = |key: &str, values: &[String]| labels.label(key).is_some_and(|v| values.iter().any(|w| w == v));
        match self {
            Self::Equals(key, value) => labels.label(key) == Some(value.as_str()),
            Self::NotEquals(key, value) => labels.label(key) != Some(value.as_str()),
            Self::In(key, values) => one_of(key, values),
            Self::NotIn(key, values) => !one_of(key, values),
            Self::Exists(key) => labels.label(key).is_some(),
            Self::DoesNotExist(key) => labels.label(key).is_none(),
        }
    }

    /// The label values an object must have under `key` to match, when the
    /// requirement pins them (`=` and `in`); an index can answer those.
    #[must_use]
    pub fn required_values(&self) -> Option<(&str, &[String])> {
        match self {
            Self::Equals(key, value) => Some((key, std::slice::from_ref(value))),
            Self::In(key, values) => Some((key, values)),
            _ => None,
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Parses the string form.
    ///
    /// # Errors
    ///
    /// When the string is longer than [`MAX_SELECTOR_LEN`] or not a valid selector.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let error = |reason: String| SelectorError {
            selector: truncate(selector, 100).to_owned(),
            reason,
        };
        if selector.len() > MAX_SELECTOR_LEN {
            return Err(error(format!("longer than {MAX_SELECTOR_LEN} bytes")));
        }
        let requirements = split_requirements(selector)
            .map_err(error)?
            .into_iter()
            .map(|term| parse_requirement(term).map_err(error))
            .collect::<Result<_, _>>()?;
        Ok(Self { requirements })
    }

    /// The requirements, all of which must hold.
    #[must_use]
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True for the empty selector, which matches everything.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    #[must_use]
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches(labels))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match requirement {
                Requirement::Equals(key, value) => write!(f, "{key}={value}")?,
                Requirement::NotEquals(key, value) => write!(f, "{key}!={value}")?,
                Requirement::In(key, values) => write!(f, "{key} in ({})", values.join(","))?,
                Requirement::NotIn(key, values) => write!(f, "{key} notin ({})", values.join(","))?,
                Requirement::Exists(key) => f.write_str(key)?,
                Requirement::DoesNotExist(key) => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(selector: &str) -> Result<Self, Self::Err> {
        Self::parse(selector)
    }
}

/// Splits at the commas that are not inside a parenthesised value set.
fn split_requirements(selector: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0_u32, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("unbalanced ')'".into()),
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '('".into());
    }
    terms.push(&selector[start..]);
    if terms.len() == 1 && terms[0].trim().is_empty() {
        return Ok(Vec::new());
    }
    Ok(terms)
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    let term = term.trim();
    if term.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(label_key(key.trim())?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            label_key(key.trim())?,
            label_value(value.trim())?,
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(label_key(key.trim())?, label_value(value.trim())?));
    }
    if let Some(open) = term.find('(') {
        let (head, set) = term.split_at(open);
        let set = set
            .strip_prefix('(')
            .and_then(|set| set.strip_suffix(')'))
            .ok_or_else(|| format!("{term:?}: text after the value set"))?;
        let values = set
            .split(',')
            .map(|value| label_value(value.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut words = head.split_whitespace();
        let (Some(key), Some(operator), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("{term:?}: want `key in (...)` or `key notin (...)`"));
        };
        let key = label_key(key)?;
        return match operator {
            "in" => Ok(Requirement::In(key, values)),
            "notin" => Ok(Requirement::NotIn(key, values)),
            other => Err(format!("unknown operator {other:?}")),
        };
    }
    if term.contains(char::is_whitespace) {
        return Err(format!("{term:?}: unexpected whitespace"));
    }
    Ok(Requirement::Exists(label_key(term)?))
}

/// Checks a label key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn label_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let valid = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !valid {
            return Err(format!("invalid label key prefix {:?}", truncate(prefix, 100)));
        }
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!("invalid label key {:?}", truncate(key, 100)));
    }
    Ok(key.to_owned())
}

/// Checks a label value: empty, or a name as in [`label_key`].
fn label_value(value: &str) -> Result<String, String> {
    if value.is_empty() || is_label_name(value) {
        Ok(value.to_owned())
    } else {
        Err(format!("invalid label value {:?}", truncate(value, 100)))
    }
}

fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn every_operator_parses_and_round_trips() {
        let selector = Selector::parse("app=web, tier in (a,b),env!=prod,x notin (1),canary,!legacy,k==v").unwrap();
        assert_eq!(
            selector.requirements(),
            &[
                Requirement::Equals("app".into(), "web".into()),
                Requirement::In("tier".into(), vec!["a".into(), "b".into()]),
                Requirement::NotEquals("env".into(), "prod".into()),
                Requirement::NotIn("x".into(), vec!["1".into()]),
                Requirement::Exists("canary".into()),
                Requirement::DoesNotExist("legacy".into()),
                Requirement::Equals("k".into(), "v".into()),
            ]
        );
        let reparsed = Selector::parse(&selector.to_string()).unwrap();
        assert_eq!(reparsed, selector);
    }

    #[test]
    fn matching_follows_kubernetes_semantics() {
        let pod = labels(&[("app", "web"), ("tier", "a")]);
        let matches = |s: &str| Selector::parse(s).unwrap().matches(&pod);
        assert!(matches(""));
        assert!(matches("app=web,tier in (a,b)"));
        assert!(!matches("app=db"));
        assert!(matches("env!=prod"), "!= matches an absent label");
        assert!(matches("env notin (prod)"), "notin matches an absent label");
        assert!(!matches("env in (prod)"), "in needs the label");
        assert!(matches("app") && !matches("!app"));
        assert!(matches("!env") && !matches("env"));
    }

    #[test]
    fn malformed_selectors_are_rejected_with_the_reason() {
        for bad in [
            "app=",
            "=web",
            "app in (a",
            "app in a,b)",
            "a b",
            "app=-x",
            "tier within (a)",
            ",",
            "x/y/=z",
        ] {
            let result = Selector::parse(bad);
            if bad == "app=" {
                // An empty value is a valid label value.
                assert!(result.is_ok(), "{bad:?} should parse");
                continue;
            }
            let error = result.expect_err(bad).to_string();
            assert!(error.starts_with("invalid label selector"), "{error}");
        }
        let long = "a=b,".repeat(MAX_SELECTOR_LEN);
        assert!(Selector::parse(&long).unwrap_err().to_string().contains("longer than"));
    }

    #[test]
    fn prefixed_keys_are_valid() {
        let selector = Selector::parse("app.kubernetes.io/name=web").unwrap();
        assert!(selector.matches(&labels(&[("app.kubernetes.io/name", "web")])));
        assert!(Selector::parse("Bad_Prefix.io/name=web").is_err());
    }
}
