//! Text a member chose (a host it asked for, a file name, a line it wrote), made safe to show
//! a person: nothing in it can move the cursor, recolour or retitle a terminal, reorder what
//! follows (bidirectional overrides), or start a line of ateam's own (line separators).

use std::borrow::Cow;

/// Whether `c` may steer how a terminal or an editor shows the text around it.
fn steers(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200E}' | '\u{200F}' | '\u{061C}'      // direction marks
            | '\u{202A}'..='\u{202E}'                 // embeddings and overrides
            | '\u{2066}'..='\u{2069}'                 // isolates
            | '\u{2028}' | '\u{2029}'                 // line and paragraph separators
            | '\u{FEFF}')
}

/// Whether any character of `s` could steer how it is shown (`shown` would escape it).
pub(crate) fn steering(s: &str) -> bool {
    s.chars().any(steers)
}

/// Whether `s` holds a character that could steer how it is shown other than a tab or a line
/// end: what a member may put in a command or an environment value, which ateam writes back
/// as YAML (`export`), escaping controls but not bidi overrides.
pub(crate) fn hidden_steering(s: &str) -> bool {
    s.chars()
        .any(|c| steers(c) && !matches!(c, '\t' | '\n' | '\r'))
}

/// `s` with every character that `steers` written as a visible escape (`\u{1b}`), the rest as
/// it is: what a member wrote is shown, never obeyed.
pub fn shown(s: &str) -> Cow<'_, str> {
    if !steering(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if steers(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn what_could_steer_a_terminal_is_shown_escaped() {
        assert_eq!(shown("api.example.com"), "api.example.com");
        assert_eq!(shown("a\u{1b}]2;owned\u{7}b"), "a\\u{1b}]2;owned\\u{7}b");
        assert_eq!(
            shown("x\u{2028}- ok\u{202e}gpj.exe"),
            "x\\u{2028}- ok\\u{202e}gpj.exe"
        );
        assert_eq!(shown("tab\there\nnl"), "tab\\u{9}here\\u{a}nl");
        assert_eq!(shown("ünïcode ✓"), "ünïcode ✓");
    }
}
