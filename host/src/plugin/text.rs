//! Text a plugin controls, made safe to show: in the host's log, the status
//! endpoint and metric labels.
//!
//! A plugin chooses its log lines, its error messages, its registration's name
//! and version, the kinds it subscribes to, the names in its trap backtraces
//! and, through whoever drops it in the directory, its file name. Every such
//! string passes [`sanitize`] before it is shown, so a plugin cannot break a log
//! line, forge one that looks like the host's, or hide text with terminal
//! escapes or bidirectional overrides.

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
    fn long_text_is_cut_on_a_character_boundary() {
        let long = sanitize(&"é".repeat(100), 11);
        assert!(long.len() <= 11 + '…'.len_utf8());
        assert!(long.ends_with('…'));
        assert_eq!(sanitize("short", 11), "short");
    }
}
