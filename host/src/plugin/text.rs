//! Text a plugin controls, made safe to show: in the host's log, the status
//! endpoint and metric labels.
//!
//! A plugin chooses its log lines, its error messages, its registration's name
//! and version, the kinds it subscribes to, the names in its trap backtraces
//! and, through whoever drops it in the directory, its file name. Every such
//! string passes [`sanitize`] before it is shown, so a plugin cannot break a log
//! line, forge one that looks like the host's, or hide text with terminal
//! escapes or bidirectional overrides.
//!
//! A URL, whoever wrote it (a plugin's request, a manifest's allow-list), is
//! shown through [`redact_url`]: its user info, query and fragment are where
//! credentials travel (`https://user:token@host/`, `?token=…`), and none of
//! them reaches a log line, an error or a status.

/// The longest error message of a plugin shown; longer ones are cut.
pub const MAX_ERROR_LEN: usize = 1024;

/// `text` with every control character (newlines, ESC, BEL, ...), line and
/// paragraph separator, bidirectional override and zero-width character
/// replaced by U+FFFD, cut to at most `max_len` bytes (marked with `…`).
#[must_use]
pub fn sanitize(text: &str, max_len: usize) -> String {
    let mut clean = String::with_capacity(text.len().min(max_len));
    for c in text.chars() {
        let c = if is_unsafe(c) { '\u{fffd}' } else { c };
        if clean.len() + c.len_utf8() > max_len {
            clean.push('…');
            break;
        }
        clean.push(c);
    }
    clean
}

/// `url` with its user info, query and fragment each replaced by `…`:
/// `http://user:secret@host/path?token=x` is shown as
/// `http://…@host/path?…`. The scheme, host, port and path stay, so a reader
/// still sees where the request went. Works on any text, parsed or not: the
/// authority is what follows `scheme://` (or the start) up to the first `/`,
/// `?` or `#`, and its user info everything up to its last `@`.
#[must_use]
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at)
            if url[..at]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            url.split_at(at + "://".len())
        }
        _ => ("", url),
    };
    let (authority, rest) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let (path, rest) = rest.split_at(rest.find(['?', '#']).unwrap_or(rest.len()));
    let mut shown = String::with_capacity(url.len());
    shown.push_str(scheme);
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            shown.push_str("…@");
            shown.push_str(host);
        }
        None => shown.push_str(authority),
    }
    shown.push_str(path);
    if rest.starts_with('?') {
        shown.push_str("?…");
    }
    if rest.contains('#') {
        shown.push_str("#…");
    }
    shown
}

fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Line and paragraph separators.
            '\u{2028}' | '\u{2029}'
            // Bidirectional marks, embeddings, overrides and isolates.
            | '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            // Zero-width characters and the byte-order mark.
            | '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_escapes_are_replaced() {
        assert_eq!(
            sanitize("ok\n\u{1b}[31mred\u{7}", 100),
            "ok\u{fffd}\u{fffd}[31mred\u{fffd}"
        );
        assert_eq!(
            sanitize("a\r\nINFO kinformer: forged", 100),
            "a\u{fffd}\u{fffd}INFO kinformer: forged"
        );
    }

    #[test]
    fn bidi_overrides_separators_and_zero_width_characters_are_replaced() {
        let sneaky = "name\u{202e}gnp.exe\u{2028}x\u{200b}y\u{2066}z\u{feff}";
        let clean = sanitize(sneaky, 100);
        assert_eq!(clean.matches('\u{fffd}').count(), 5, "{clean:?}");
        assert!(clean.chars().all(|c| !is_unsafe(c)));
    }

    #[test]
    fn a_url_is_shown_without_its_user_info_query_or_fragment() {
        for (url, shown) in [
            ("http://user:SECRET@example.com/hook", "http://…@example.com/hook"),
            ("https://SECRET@example.com:8443", "https://…@example.com:8443"),
            ("https://example.com/a/b?token=SECRET&x=1", "https://example.com/a/b?…"),
            ("https://example.com/a#access_token=SECRET", "https://example.com/a#…"),
            (
                "https://u:SECRET@[::1]:81/p?q=SECRET#f=SECRET",
                "https://…@[::1]:81/p?…#…",
            ),
            ("https://example.com?SECRET", "https://example.com?…"),
            // A user info that itself holds an `@` goes whole.
            ("http://a@SECRET@example.com/", "http://…@example.com/"),
            // No scheme: the authority starts the text.
            ("user:SECRET@example.com/x", "…@example.com/x"),
            // An `@` in the path is the path's.
            ("https://example.com/users/@me", "https://example.com/users/@me"),
            // A `://` after a query is the query's.
            ("example.com/?SECRET://x", "example.com/?…"),
            (
                "https://hooks.slack.com:443/services/",
                "https://hooks.slack.com:443/services/",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("SECRET"), "{url}");
        }
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let long = sanitize(&"é".repeat(100), 11);
        assert!(long.len() <= 11 + '…'.len_utf8());
        assert!(long.ends_with('…'));
        assert_eq!(sanitize("short", 11), "short");
    }
}
