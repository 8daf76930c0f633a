//! Kinesis positions: sequence numbers and the (sequence, sub-sequence) pairs
//! that checkpoints record.

use std::cmp::Ordering;
use std::fmt;

/// A position in a shard: a record's sequence number, plus the sub-sequence
/// number of a user record inside a KPL aggregate.
///
/// Kinesis sequence numbers are decimal strings of up to 56 digits (wider than
/// any integer type), so they are compared as canonical decimal strings.
#[derive(Clone, Debug)]
pub struct Position {
    sequence_number: String,
    sub_sequence_number: Option<u64>,
}

/// A string that is not a Kinesis sequence number.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a sequence number (expected decimal digits)")]
pub struct NotASequenceNumber(pub String);

impl Position {
    /// A position from a sequence number as Kinesis wrote it.
    pub fn new(
        sequence_number: &str,
        sub_sequence_number: Option<u64>,
    ) -> Result<Self, NotASequenceNumber> {
        if sequence_number.is_empty() || !sequence_number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotASequenceNumber(sequence_number.to_owned()));
        }
        Ok(Self {
            sequence_number: sequence_number.to_owned(),
            sub_sequence_number,
        })
    }

    /// The sequence number, as Kinesis wrote it.
    pub fn sequence_number(&self) -> &str {
        &self.sequence_number
    }

    /// The sub-sequence number inside a KPL aggregate, if any.
    pub fn sub_sequence_number(&self) -> Option<u64> {
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
        a.len()
            .cmp(&b.len())
            .then_with(|| a.cmp(b))
            // A whole record (no sub-sequence) sorts after all its user records:
            // checkpointing it means every user record in it is done.
            .then_with(|| {
                let rank = |s: Option<u64>| s.map_or(u128::MAX, u128::from);
                rank(self.sub_sequence_number).cmp(&rank(other.sub_sequence_number))
            })
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
            Some(sub) => write!(f, "{}/{}", self.sequence_number, sub),
            None => f.write_str(&self.sequence_number),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pos(s: &str) -> Position {
        Position::new(s, None).unwrap()
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
        let whole = pos("100");
        let first = Position::new("100", Some(0)).unwrap();
        let second = Position::new("100", Some(1)).unwrap();
        assert!(first < second && second < whole && whole < pos("101"));
    }

    #[test]
    fn rejects_non_digits() {
        assert_eq!(
            Position::new("TRIM_HORIZON", None),
            Err(NotASequenceNumber("TRIM_HORIZON".into()))
        );
        assert!(Position::new("", None).is_err());
    }

    proptest! {
        #[test]
        fn order_matches_u128(a: u128, b: u128) {
            prop_assert_eq!(pos(&a.to_string()).cmp(&pos(&b.to_string())), a.cmp(&b));
        }
    }
}
