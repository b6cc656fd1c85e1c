//! Pass 2: step ids — charset, reserved names, duplicates.
//!
//! Duplicates are found on the NFC form of each id, so `café` written with U+00E9 and with `e` + U+0301 collide
//! (case C01 variant b) even though the charset rule would reject both anyway: the duplicate is the more useful
//! message when a model emits the same id twice. Detection is one hash map pass, O(n).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::RESERVED_STEP_IDS;
use crate::pointer;
use crate::validate::shape::Slot;

/// Maximum id length in characters (contract §2).
pub(crate) const MAX_ID_LEN: usize = 64;

/// True when `id` matches `[A-Za-z_][A-Za-z0-9_-]{0,63}`.
pub(crate) fn is_valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && id.len() <= MAX_ID_LEN
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(crate) fn check(slots: &[Slot], out: &mut Vec<Diagnostic>) {
    let mut first_seen: HashMap<String, (usize, &str)> = HashMap::with_capacity(slots.len());
    for slot in slots {
        let Some(id) = slot.id.as_deref() else {
            continue;
        };
        let at = pointer::step_field(slot.index, "id");
        if RESERVED_STEP_IDS.contains(&id) {
            let msg = format!("step id `{id}` is reserved (placeholders and conditions use it as a root)");
            out.push(
                Diagnostic::error(Code::ReservedStepId, &at, msg).step(id).hint(format!("rename it, e.g. `{id}_step`")),
            );
        } else if !is_valid_id(id) {
            let msg = format!("step id `{id}` must match [A-Za-z_][A-Za-z0-9_-]{{0,63}}");
            let hint = "use ASCII letters, digits, `_` and `-`, starting with a letter or `_`; put free text in `goal`";
            out.push(Diagnostic::error(Code::InvalidStepId, &at, msg).step(id).hint(hint));
        }
        let key: String = id.nfc().collect();
        match first_seen.get(&key) {
            Some(&(first_index, first_id)) => {
                let same =
                    if first_id == id { String::new() } else { " (equal after Unicode NFC normalisation)".into() };
                let msg = format!(
                    "step id `{id}` at index {} repeats the id of the step at index {first_index}{same}",
                    slot.index
                );
                let hint = "give every step a unique id and update depends_on and placeholders that meant this one";
                out.push(Diagnostic::error(Code::DuplicateStepId, &at, msg).step(id).hint(hint));
            }
            None => {
                first_seen.insert(key, (slot.index, id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_valid_id;

    #[test]
    fn id_charset_follows_the_contract() {
        assert!(is_valid_id("weather"));
        assert!(is_valid_id("_a-1"));
        assert!(!is_valid_id("1a"));
        assert!(!is_valid_id("提醒"));
        assert!(!is_valid_id(""));
        assert!(is_valid_id(&"a".repeat(64)));
        assert!(!is_valid_id(&"a".repeat(65)));
    }
}
