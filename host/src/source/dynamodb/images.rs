//! Which item images a processor needs a DynamoDB stream to carry
//! (`--needs-images`), checked against the stream's view type at start: a
//! processor that sums `NewImage` amounts must not start on a `KEYS_ONLY`
//! stream and see nothing but keys.

use std::fmt;
use std::str::FromStr;

use super::StreamFacts;

/// The images a processor reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Images {
    /// `NewImage`: the item after the change.
    New,
    /// `OldImage`: the item before the change.
    Old,
    /// Both.
    NewAndOld,
}

impl FromStr for Images {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "new" => Ok(Images::New),
            "old" => Ok(Images::Old),
            "new-and-old" => Ok(Images::NewAndOld),
            other => Err(format!("`{other}` is not one of new, old, new-and-old")),
        }
    }
}

impl fmt::Display for Images {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Images::New => "new",
            Images::Old => "old",
            Images::NewAndOld => "new-and-old",
        })
    }
}

impl Images {
    /// Whether a stream of `view_type` carries these images.
    fn carried_by(self, view_type: &str) -> bool {
        match self {
            Images::New => matches!(view_type, "NEW_IMAGE" | "NEW_AND_OLD_IMAGES"),
            Images::Old => matches!(view_type, "OLD_IMAGE" | "NEW_AND_OLD_IMAGES"),
            Images::NewAndOld => view_type == "NEW_AND_OLD_IMAGES",
        }
    }

    /// The least view type that carries these images.
    fn view_type(self) -> &'static str {
        match self {
            Images::New => "NEW_IMAGE",
            Images::Old => "OLD_IMAGE",
            Images::NewAndOld => "NEW_AND_OLD_IMAGES",
        }
    }
}

impl StreamFacts {
    /// Refuses a stream that lacks the images `needs`, saying how to get
    /// a stream that has them (a view type is fixed for a stream's life).
    pub fn check_images(&self, needs: Images) -> Result<(), String> {
        if needs.carried_by(&self.view_type) {
            return Ok(());
        }
        let (table, view) = (&self.table, needs.view_type());
        Err(format!(
            "the stream of table `{table}` carries {} records, and this processor needs {needs} images (--needs-images {needs}); \
             a stream's view type is fixed: turn the stream off and on again with {view} or NEW_AND_OLD_IMAGES \
             (`aws dynamodb update-table --table-name {table} --stream-specification StreamEnabled=false`, then \
             `StreamEnabled=true,StreamViewType={view}`); the new stream holds only changes made after it was turned on",
            self.view_type
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(view_type: &str) -> StreamFacts {
        StreamFacts { arn: "arn".into(), table: "orders".into(), view_type: view_type.into(), hash_key: "pk".into(), created_epoch: 0 }
    }

    #[test]
    fn a_stream_without_the_images_asked_for_is_refused_with_the_fix() {
        assert_eq!("new-and-old".parse(), Ok(Images::NewAndOld));
        assert!("both".parse::<Images>().unwrap_err().contains("new, old, new-and-old"));
        assert!(facts("NEW_AND_OLD_IMAGES").check_images(Images::NewAndOld).is_ok());
        assert!(facts("NEW_IMAGE").check_images(Images::New).is_ok());
        assert!(facts("OLD_IMAGE").check_images(Images::Old).is_ok());
        let refused = facts("KEYS_ONLY").check_images(Images::New).unwrap_err();
        assert!(refused.contains("table `orders` carries KEYS_ONLY records") && refused.contains("StreamViewType=NEW_IMAGE"), "{refused}");
        assert!(facts("NEW_IMAGE").check_images(Images::NewAndOld).unwrap_err().contains("needs new-and-old images"));
        assert!(facts("OLD_IMAGE").check_images(Images::New).is_err());
    }
}
