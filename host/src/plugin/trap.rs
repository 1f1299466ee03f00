//! What a trap is said with: the plugin's own account of its failure (what it
//! printed to stderr: a Python exception, a Rust panic message) first, then
//! why wasmtime stopped it, with the guest backtrace kept for the debug log.

use super::Error;

/// The trap of `call` in `plugin`: its error, with what the plugin printed to
/// stderr during the call (`stderr`, oldest first) read for its own account
/// of the failure. The guest backtrace goes to the debug log.
pub(super) fn trap(plugin: &str, call: &'static str, source: wasmtime::Error, stderr: &[String]) -> Error {
    if let Some(backtrace) = source.downcast_ref::<wasmtime::WasmBacktrace>() {
        tracing::debug!(plugin, call, "trap backtrace: {backtrace}");
    }
    let reason = reason(&source);
    let guest = guest_error(stderr);
    Error::Trap {
        plugin: plugin.to_owned(),
        call,
        summary: match guest {
            Some(guest) => crate::text::sanitize(&format!("{guest}; {reason}"), crate::text::MAX_ERROR_LEN),
            None => reason,
        },
        trap: source,
    }
}

/// Why wasmtime stopped the call: every message of the error's chain but the
/// guest backtrace (the trap code, a limit, a host function's refusal).
fn reason(error: &wasmtime::Error) -> String {
    let parts: Vec<String> = error
        .chain()
        .map(ToString::to_string)
        .filter(|part| !part.starts_with("error while executing at wasm backtrace"))
        .collect();
    let reason = if parts.is_empty() {
        error.root_cause().to_string()
    } else {
        parts.join(": ")
    };
    crate::text::sanitize(&reason, crate::text::MAX_ERROR_LEN)
}

/// The plugin's own account of its failure in what it printed: the
/// exception of a Python traceback (with where it was raised), or a Rust
/// panic's message.
fn guest_error(stderr: &[String]) -> Option<String> {
    python_exception(stderr).or_else(|| rust_panic(stderr))
}

/// `KeyError: 'app' (app.py, line 20, in handle)` from the last traceback.
fn python_exception(stderr: &[String]) -> Option<String> {
    let start = stderr
        .iter()
        .rposition(|line| line.starts_with("Traceback (most recent call last)"))?;
    let after = &stderr[start + 1..];
    let frames = after.iter().take_while(|line| line.starts_with(' '));
    let place = frames.filter_map(|line| frame(line)).last();
    let exception = after.iter().find(|line| !line.starts_with(' ') && !line.is_empty())?;
    Some(match place {
        Some(place) => format!("{exception} ({place})"),
        None => exception.clone(),
    })
}

/// `app.py, line 20, in handle` from `  File "/0/app.py", line 20, in handle`:
/// the component's own mount prefix (`/0/`) left out.
fn frame(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (path, rest) = rest.split_once('"')?;
    let path = match path.strip_prefix('/').and_then(|path| path.split_once('/')) {
        Some((mount, file)) if mount.chars().all(|c| c.is_ascii_digit()) => file,
        _ => path,
    };
    Some(format!("{path}{rest}"))
}

/// `panicked at src/lib.rs:10:5: message` from a Rust panic's lines.
fn rust_panic(stderr: &[String]) -> Option<String> {
    let start = stderr.iter().rposition(|line| line.contains(" panicked at "))?;
    let (_, place) = stderr[start].split_once(" panicked at ")?;
    let message: Vec<&str> = stderr[start + 1..]
        .iter()
        .map(String::as_str)
        .take_while(|line| !line.starts_with("note: run with `RUST_BACKTRACE"))
        .filter(|line| !line.is_empty())
        .collect();
    let place = place.trim_end_matches(':');
    Some(if message.is_empty() {
        format!("panicked at {place}")
    } else {
        format!("panicked at {place}: {}", message.join(" "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_python_exception_is_told_by_its_last_line_and_where_it_was_raised() {
        // As componentize-py's runtime prints an exception from `handle`.
        let stderr = lines(
            "Traceback (most recent call last):\n  File \"/1/kinformer/__init__.py\", line 427, in handle\n  \
             File \"/0/app.py\", line 20, in handle\nKeyError: 'app'\n\nthread '<unnamed>' (1) panicked at \
             runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\nnote: run with \
             `RUST_BACKTRACE=1` environment variable to display a backtrace",
        );
        assert_eq!(
            guest_error(&stderr).as_deref(),
            Some("KeyError: 'app' (app.py, line 20, in handle)")
        );
    }

    #[test]
    fn a_rust_panic_is_told_by_its_message_and_place() {
        let stderr = lines(
            "handled 2 deltas\nthread '<unnamed>' panicked at src/lib.rs:40:13:\ntrapping on delta 3\nnote: run \
             with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        );
        assert_eq!(
            guest_error(&stderr).as_deref(),
            Some("panicked at src/lib.rs:40:13: trapping on delta 3")
        );
    }

    #[test]
    fn a_plugin_that_printed_nothing_of_its_failure_has_no_account() {
        assert_eq!(guest_error(&lines("handled 2 deltas\nall fine")), None);
        assert_eq!(guest_error(&[]), None);
    }

    #[test]
    fn the_reason_leaves_the_backtrace_out_and_keeps_every_other_message() {
        let error = wasmtime::Error::msg("wasm trap: wasm `unreachable` instruction executed")
            .context("error while executing at wasm backtrace:\n    0: 0x1 - app!handle")
            .context("the call ran past its deadline");
        assert_eq!(
            reason(&error),
            "the call ran past its deadline: wasm trap: wasm `unreachable` instruction executed"
        );
    }
}
