//! The text of keys the plan composes from a request's entries.

/// `text` with `|`, `=` and `\` escaped, so that keys joined by them
/// never meet.
pub(super) fn escape_into(key: &mut Vec<u8>, text: &str) {
    for byte in text.bytes() {
        if matches!(byte, b'|' | b'=' | b'\\') {
            key.push(b'\\');
        }
        key.push(byte);
    }
}
