//! Positions in a shard: a record's sequence number and, for a user record
//! inside a KPL aggregate, its sub-sequence number — the pair checkpoints
//! record, in the Java KCL's sense.

use std::cmp::Ordering;
use std::fmt;

/// A position in a shard: `(sequence number, sub-sequence number)`, the
/// sub-sequence number being a user record's index inside its KPL aggregate
/// and 0 for a record that is not aggregated. This is how Java KCL writes
/// `checkpoint` / `checkpointSubSequenceNumber`: a checkpoint at
/// `(s, n)` means every user record up to and including sub-record `n` of
/// record `s` is done, so a restart reads from `s` again and skips exactly
/// those.
///
/// Kinesis sequence numbers are decimal strings of up to 56 digits (wider than
/// any integer type), so they are compared as canonical decimal strings.
#[derive(Clone, Debug)]
pub struct Position {
    sequence_number: String,
    sub_sequence_number: u64,
}

/// A string that is not a Kinesis sequence number.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a sequence number (expected decimal digits)")]
pub struct NotASequenceNumber(pub String);

impl Position {
    /// A position from a sequence number as Kinesis wrote it.
    pub fn new(sequence_number: &str, sub_sequence_number: u64) -> Result<Self, NotASequenceNumber> {
        if sequence_number.is_empty() || !sequence_number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotASequenceNumber(sequence_number.to_owned()));
        }
        Ok(Self { sequence_number: sequence_number.to_owned(), sub_sequence_number })
    }

    /// The sequence number, as Kinesis wrote it.
    pub fn sequence_number(&self) -> &str {
        &self.sequence_number
    }

    /// The user record's index inside its KPL aggregate; 0 otherwise.
    pub fn sub_sequence_number(&self) -> u64 {
        self.sub_sequence_number
    }

    fn digits(&self) -> &str {
        let trimmed = self.sequence_number.trim_start_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.digits(), other.digits());
        a.len().cmp(&b.len()).then_with(|| a.cmp(b)).then_with(|| self.sub_sequence_number.cmp(&other.sub_sequence_number))
    }
}

impl PartialEq for Position {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Position {}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sub_sequence_number {
            0 => f.write_str(&self.sequence_number),
            sub => write!(f, "{}/{}", self.sequence_number, sub),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pos(s: &str) -> Position {
        Position::new(s, 0).unwrap()
    }

    #[test]
    fn compares_numerically_not_lexically() {
        assert!(pos("9") < pos("10"));
        assert_eq!(pos("0010"), pos("10"));
        assert!(
            pos("49590338271490256608559692538361571095921575989136588898")
                > pos("49590338271490256608559692538361571095921575989136588897")
        );
    }

    #[test]
    fn user_records_sort_inside_their_aggregate() {
        let first = pos("100");
        let second = Position::new("100", 1).unwrap();
        assert!(first < second && second < pos("101"));
        assert_eq!(second.to_string(), "100/1");
    }

    #[test]
    fn rejects_non_digits() {
        assert_eq!(Position::new("TRIM_HORIZON", 0), Err(NotASequenceNumber("TRIM_HORIZON".into())));
        assert!(Position::new("", 0).is_err());
    }

    proptest! {
        #[test]
        fn order_matches_u128(a: u128, b: u128) {
            prop_assert_eq!(pos(&a.to_string()).cmp(&pos(&b.to_string())), a.cmp(&b));
        }
    }
}
