//! Shards of a stream, their parent/child graph, and the shard sync that
//! creates a lease for every shard that should have one.
//!
//! Rules (as the Java KCL's shard syncer, without its pitfalls):
//! - A shard gets a lease if a parent has or gets one (it starts at
//!   `TRIM_HORIZON`, after its parents), or if it is a root: at the initial
//!   position, except that under `LATEST` a closed root is skipped.
//! - A shard with a leased descendant never gets a lease again: a finished
//!   parent whose lease was cleaned up is not processed twice.
//! - A finished lease is deleted only once every child has started.

use std::collections::{HashMap, HashSet};

use crate::lease::{Checkpoint, Lease, LeaseKey};
pub use crate::stream::{list_shards, Shard};

/// Where a shard with no checkpoint and no leased parent starts.
#[derive(Clone, Debug, PartialEq)]
pub enum InitialPosition {
    /// Every record still kept.
    TrimHorizon,
    /// Only records put after the lease is created.
    Latest,
    /// Milliseconds since the Unix epoch.
    AtTimestamp(i64),
}

impl InitialPosition {
    /// The checkpoint a new root lease records.
    pub fn checkpoint(&self) -> Checkpoint {
        match self {
            Self::TrimHorizon => Checkpoint::TrimHorizon,
            Self::Latest => Checkpoint::Latest,
            Self::AtTimestamp(_) => Checkpoint::AtTimestamp,
        }
    }
}

/// The leases a sync of one stream should create, parents before
/// children: `shards` are the stream's, `leases` its leases, and `key`
/// names a shard's lease (the shard id, or with the stream).
pub fn plan_new_leases(shards: &[Shard], leases: &[&Lease], initial: &InitialPosition, key: impl Fn(&str) -> LeaseKey) -> Vec<Lease> {
    let graph = Graph::new(shards, leases);
    let mut planned: HashMap<&str, bool> = HashMap::new();
    let mut created = Vec::new();
    for shard in shards {
        graph.plan(&shard.id, initial, &mut planned, &mut created);
    }
    for lease in &mut created {
        lease.key = key(lease.key.as_str());
        lease.parents = lease.parents.iter().map(|parent| key(parent).into()).collect();
    }
    created
}

/// Finished leases that may be deleted: every child recorded with
/// `SHARD_END` has a lease that has started.
pub fn plan_cleanup(leases: &[Lease]) -> Vec<LeaseKey> {
    let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
    leases
        .iter()
        .filter(|l| l.is_finished() && !l.children.is_empty())
        .filter(|l| l.children.iter().all(|c| by_key.get(c.as_str()).is_some_and(|child| child.checkpoint.has_started())))
        .map(|l| l.key.clone())
        .collect()
}

struct Graph<'a> {
    shards: HashMap<&'a str, &'a Shard>,
    children: HashMap<&'a str, Vec<&'a str>>,
    leased: HashSet<&'a str>,
}

impl<'a> Graph<'a> {
    fn new(shards: &'a [Shard], leases: &[&'a Lease]) -> Self {
        let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
        for shard in shards {
            for parent in &shard.parents {
                children.entry(parent.as_str()).or_default().push(&shard.id);
            }
        }
        Self {
            shards: shards.iter().map(|s| (s.id.as_str(), s)).collect(),
            children,
            leased: leases.iter().map(|l| l.key.shard_id()).collect(),
        }
    }

    fn has_leased_descendant(&self, id: &str) -> bool {
        self.children
            .get(id)
            .is_some_and(|kids| kids.iter().any(|kid| self.leased.contains(kid) || self.has_leased_descendant(kid)))
    }

    /// Whether `id` has or will have a lease; plans its lease (after its
    /// parents') if it needs one.
    fn plan(&self, id: &'a str, initial: &InitialPosition, planned: &mut HashMap<&'a str, bool>, created: &mut Vec<Lease>) -> bool {
        if self.leased.contains(id) {
            return true;
        }
        if let Some(&known) = planned.get(id) {
            return known;
        }
        let Some(shard) = self.shards.get(id).copied() else {
            return false; // aged out of the stream
        };
        let mut any_parent_leased = false;
        for parent in &shard.parents {
            any_parent_leased |= self.plan(parent, initial, planned, created);
        }
        let lease = if self.has_leased_descendant(id) {
            None
        } else if any_parent_leased {
            Some(Checkpoint::TrimHorizon)
        } else if *initial == InitialPosition::Latest && shard.closed {
            None
        } else {
            Some(initial.checkpoint())
        };
        let will_have_lease = lease.is_some();
        planned.insert(id, will_have_lease);
        if let Some(checkpoint) = lease {
            // A DynamoDB stream's shards have no hash keys.
            let hash_key = |key: &String| (!key.is_empty()).then(|| key.clone());
            created.push(Lease {
                starting_hash_key: hash_key(&shard.starting_hash_key),
                ending_hash_key: hash_key(&shard.ending_hash_key),
                ..Lease::new(id, checkpoint, shard.parents.clone())
            });
        }
        will_have_lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn shard(id: &str, parents: &[&str], closed: bool) -> Shard {
        Shard {
            id: id.into(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
            starting_hash_key: "0".into(),
            ending_hash_key: "1".into(),
            closed,
        }
    }

    fn planned(shards: &[Shard], leases: &[Lease], initial: InitialPosition) -> Vec<(String, Checkpoint)> {
        let leases: Vec<&Lease> = leases.iter().collect();
        plan_new_leases(shards, &leases, &initial, |id| LeaseKey::shard(id)).into_iter().map(|l| (l.key.into(), l.checkpoint)).collect()
    }

    /// The seed's stream: one shard split into two.
    fn split() -> Vec<Shard> {
        vec![shard("s0", &[], true), shard("s1", &["s0"], false), shard("s2", &["s0"], false)]
    }

    #[test]
    fn trim_horizon_leases_the_parent_then_its_children() {
        let plan = planned(&split(), &[], InitialPosition::TrimHorizon);
        assert_eq!(
            plan,
            vec![
                ("s0".into(), Checkpoint::TrimHorizon),
                ("s1".into(), Checkpoint::TrimHorizon),
                ("s2".into(), Checkpoint::TrimHorizon)
            ]
        );
    }

    #[test]
    fn latest_skips_a_closed_root_and_starts_its_children_at_latest() {
        let plan = planned(&split(), &[], InitialPosition::Latest);
        assert_eq!(plan, vec![("s1".into(), Checkpoint::Latest), ("s2".into(), Checkpoint::Latest)]);
    }

    #[test]
    fn a_merge_child_has_both_parents() {
        let shards = vec![shard("a", &[], true), shard("b", &[], true), shard("m", &["a", "b"], false)];
        let leases = plan_new_leases(&shards, &[], &InitialPosition::TrimHorizon, |id| LeaseKey::shard(id));
        let merged = leases.iter().find(|l| l.key == "m").unwrap();
        assert_eq!(merged.parents, BTreeSet::from(["a".to_owned(), "b".to_owned()]));
    }

    #[test]
    fn a_multi_stream_plan_keys_each_lease_and_its_parents_with_the_stream() {
        let stream = crate::lease::StreamIdentifier { account: "1".into(), name: "orders".into(), creation_epoch: 2 };
        let existing = Lease::new(LeaseKey::multi_stream(&stream, "s0"), Checkpoint::ShardEnd, BTreeSet::new());
        let leases = plan_new_leases(&split(), &[&existing], &InitialPosition::TrimHorizon, |id| LeaseKey::multi_stream(&stream, id));
        let keys: Vec<&str> = leases.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["1:orders:2:s1", "1:orders:2:s2"], "s0 has its lease already");
        assert_eq!(leases[0].parents, BTreeSet::from(["1:orders:2:s0".to_owned()]));
    }

    #[test]
    fn a_cleaned_up_parent_is_never_leased_again() {
        // s0 finished and was deleted; its children are leased.
        let leases: Vec<Lease> = ["s1", "s2"]
            .iter()
            .map(|k| Lease::new(*k, Checkpoint::TrimHorizon, BTreeSet::from(["s0".to_owned()])))
            .collect();
        assert!(planned(&split(), &leases, InitialPosition::TrimHorizon).is_empty());
    }

    #[test]
    fn cleanup_waits_until_every_child_has_started() {
        let mut parent = Lease::new("s0", Checkpoint::ShardEnd, BTreeSet::new());
        parent.children = BTreeSet::from(["s1".to_owned(), "s2".to_owned()]);
        let started = Checkpoint::At(crate::records::Position::new("9", 0).unwrap());
        let s1 = Lease::new("s1", started.clone(), BTreeSet::from(["s0".to_owned()]));
        let mut s2 = Lease::new("s2", Checkpoint::TrimHorizon, BTreeSet::from(["s0".to_owned()]));
        assert!(plan_cleanup(&[parent.clone(), s1.clone(), s2.clone()]).is_empty());
        s2.checkpoint = Checkpoint::ShardEnd;
        assert_eq!(plan_cleanup(&[parent, s1, s2]), vec!["s0".to_owned()]);
    }
}
