//! The clusters' positions of one kind, and the global resourceVersion after each event,
//! recorded at a cost independent of the member count.
//!
//! An event's global resourceVersion names every cluster of the kind (≈ 17 bytes per member
//! encoded), so it is not built when the event is recorded. [`Positions`] logs every change of
//! a cluster's position (moved, joined, removed) in the current [`Chunk`]: the positions when
//! the chunk began plus the changes since, in order. An event keeps a [`Mark`] (its chunk and
//! how many of the chunk's changes precede it), and its resourceVersion is derived from it
//! when a watcher sends it ([`Mark::encode`], O(clusters + changes of the chunk)): the same
//! string [`GlobalRv::encode`] gives for the positions when the event was recorded.
//!
//! A chunk takes up to `max(2 × clusters, 64)` changes and the next one starts with a copy of
//! the positions, so a change costs O(1) positions amortized (an event is one change;
//! bookmarks, event-free writes, joins and removals are the others), and the chunks the
//! ring's events keep alive hold about 1.5 positions per change.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::cache::rv::{encode_positions, GlobalRv, Pos};

/// Fewest changes a chunk takes.
const CHUNK_MIN: usize = 64;

/// What the store remembers of one cluster (kind-wide, across shards). Its position changes
/// only through [`Positions`], which logs it.
#[derive(Clone, Debug)]
pub(super) struct ClusterRec {
    /// Position of its last event (or bookmark, or event-free write).
    pos: Pos,
    /// Its index in the current chunk's positions (`None`: it joined since the chunk began).
    slot: Option<u32>,
    /// Position after its join events: resuming needs a position at least this new.
    pub(super) base_end: Pos,
    /// The cluster left; the record stays while its events are in a ring.
    pub(super) departed: bool,
    /// Its events in the rings of all shards.
    pub(super) in_ring: usize,
}

impl ClusterRec {
    /// Position of its last event.
    pub(super) fn pos(&self) -> Pos {
        self.pos
    }
}

/// One change of a cluster's position (`None`: the cluster was removed).
#[derive(Debug)]
enum Change {
    /// Of the cluster at this index of the chunk's positions.
    Slot(u32, Option<Pos>),
    /// Of a cluster that joined after the chunk began.
    Named(Arc<str>, Option<Pos>),
}

/// The positions at a point of the kind's history, and the changes after it.
#[derive(Debug)]
struct Chunk {
    /// Every cluster's position when the chunk began, by name.
    base: Box<[(Arc<str>, Pos)]>,
    /// The changes since, in order; each written once, before any [`Mark`] after it is taken.
    changes: Box<[OnceLock<Change>]>,
}

/// Where an event's global resourceVersion is derived from: the positions after the first `n`
/// changes of a chunk. Holds no per-cluster data of its own.
#[derive(Clone)]
pub(super) struct Mark {
    chunk: Arc<Chunk>,
    n: usize,
}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mark").field("clusters", &self.chunk.base.len()).field("n", &self.n).finish()
    }
}

impl Mark {
    /// The global resourceVersion at the mark, in the wire form (see [`crate::cache::rv`]).
    /// Costs O(clusters + changes before the mark in its chunk).
    pub(super) fn encode(&self) -> String {
        let base = &self.chunk.base;
        let mut at: Vec<Option<Pos>> = base.iter().map(|(_, p)| Some(*p)).collect();
        // clusters that joined in the chunk: their latest change, by name
        let mut joined: BTreeMap<&str, Option<Pos>> = BTreeMap::new();
        for c in &self.chunk.changes[..self.n] {
            match c.get().expect("a change is written before the marks after it") {
                Change::Slot(i, p) => at[*i as usize] = *p,
                Change::Named(name, p) => {
                    joined.insert(name, *p);
                }
            }
        }
        let mut old = base.iter().map(|(c, _)| &**c).zip(at).peekable();
        let mut new = joined.into_iter().peekable();
        // by name; a cluster in both left and joined again (the later record wins)
        let merged = std::iter::from_fn(move || loop {
            let next = match (old.peek(), new.peek()) {
                (None, None) => return None,
                (Some(_), None) => old.next(),
                (None, Some(_)) => new.next(),
                (Some(a), Some(b)) => match a.0.cmp(b.0) {
                    std::cmp::Ordering::Less => old.next(),
                    std::cmp::Ordering::Greater => new.next(),
                    std::cmp::Ordering::Equal => {
                        old.next();
                        new.next()
                    }
                },
            };
            if let Some((c, Some(p))) = next {
                return Some((c, p));
            }
        });
        encode_positions(merged)
    }

    /// Positions held by the mark's chunk (the positions it began with and the room for its
    /// changes), and the chunk's identity (marks of one chunk share it).
    #[cfg(test)]
    pub(super) fn held(&self) -> (usize, usize) {
        (self.chunk.base.len() + self.chunk.changes.len(), Arc::as_ptr(&self.chunk) as usize)
    }
}

/// The clusters of a kind by name, with their positions logged for [`Mark`]s.
pub(super) struct Positions {
    recs: BTreeMap<Arc<str>, ClusterRec>,
    /// The chunk changes go to.
    chunk: Arc<Chunk>,
    /// Changes written to `chunk`.
    used: usize,
    /// Positions copied into chunks when they began (the cost of starting chunks).
    #[cfg(test)]
    copied: u64,
}

impl Default for Positions {
    fn default() -> Positions {
        Positions {
            recs: BTreeMap::new(),
            chunk: Arc::new(Chunk { base: Box::new([]), changes: (0..CHUNK_MIN).map(|_| OnceLock::new()).collect() }),
            used: 0,
            #[cfg(test)]
            copied: 0,
        }
    }
}

impl Positions {
    /// The cluster's record.
    pub(super) fn get(&self, cluster: &str) -> Option<&ClusterRec> {
        self.recs.get(cluster)
    }

    /// The cluster's record, to change what is not its position.
    pub(super) fn get_mut(&mut self, cluster: &str) -> Option<&mut ClusterRec> {
        self.recs.get_mut(cluster)
    }

    /// The clusters, by name.
    pub(super) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.recs.keys()
    }

    /// Records `cluster` at `pos` (replacing its record, if any): a new incarnation whose
    /// resumable positions start at `base_end`, with `in_ring` events in the rings.
    pub(super) fn join(&mut self, cluster: &Arc<str>, pos: Pos, base_end: Pos, in_ring: usize) {
        self.log(cluster, Some(pos));
        // (a replaced record's index in the chunk stays the cluster's)
        let slot = self.recs.get(cluster).and_then(|r| r.slot);
        self.recs.insert(cluster.clone(), ClusterRec { pos, slot, base_end, departed: false, in_ring });
    }

    /// Forgets `cluster` (it leaves the global resourceVersion).
    pub(super) fn remove(&mut self, cluster: &str) {
        let Some(name) = self.recs.get_key_value(cluster).map(|(c, _)| c.clone()) else { return };
        self.log(&name, None);
        self.recs.remove(cluster);
    }

    /// Moves `cluster` (when known) to `pos`.
    pub(super) fn set(&mut self, cluster: &str, pos: Pos) {
        let Some(name) = self.recs.get_key_value(cluster).filter(|(_, r)| r.pos != pos).map(|(c, _)| c.clone()) else { return };
        self.log(&name, Some(pos));
        if let Some(r) = self.recs.get_mut(cluster) {
            r.pos = pos;
        }
    }

    /// Moves `cluster` (when known) to `pos` if that is later than its position.
    pub(super) fn advance(&mut self, cluster: &str, pos: Pos) {
        if self.recs.get(cluster).is_some_and(|r| pos > r.pos) {
            self.set(cluster, pos);
        }
    }

    /// The global resourceVersion now.
    pub(super) fn current(&self) -> GlobalRv {
        GlobalRv(self.recs.iter().map(|(c, r)| (c.to_string(), r.pos)).collect())
    }

    /// The global resourceVersion now, to be derived when needed (O(1)).
    pub(super) fn mark(&self) -> Mark {
        Mark { chunk: self.chunk.clone(), n: self.used }
    }

    /// Positions copied into chunks when they began, since the store was made.
    #[cfg(test)]
    pub(super) fn copied(&self) -> u64 {
        self.copied
    }

    /// Logs that `cluster` moves to `pos` (`None`: leaves), before the records change. When the
    /// chunk is full, a new one starts from the records' positions.
    fn log(&mut self, cluster: &Arc<str>, pos: Option<Pos>) {
        if self.used == self.chunk.changes.len() {
            let mut base = Vec::with_capacity(self.recs.len());
            for (i, (c, r)) in self.recs.iter_mut().enumerate() {
                r.slot = Some(i as u32);
                base.push((c.clone(), r.pos));
            }
            #[cfg(test)]
            {
                self.copied += base.len() as u64;
            }
            let room = (2 * base.len()).max(CHUNK_MIN);
            self.chunk = Arc::new(Chunk { base: base.into_boxed_slice(), changes: (0..room).map(|_| OnceLock::new()).collect() });
            self.used = 0;
        }
        let change = match self.recs.get(&**cluster).and_then(|r| r.slot) {
            Some(i) => Change::Slot(i, pos),
            None => Change::Named(cluster.clone(), pos),
        };
        let _ = self.chunk.changes[self.used].set(change);
        self.used += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One write to the positions: (what, cluster index, member resourceVersion, sub-index).
    fn op() -> impl Strategy<Value = (u8, usize, u64, u32)> {
        (0u8..4, 0usize..6, 0u64..50, 0u32..3)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the writes (joins, rejoins, moves, removals, across many chunks), every
        /// mark encodes to the positions when it was taken.
        #[test]
        fn marks_encode_the_positions_when_taken(ops in proptest::collection::vec(op(), 0..400)) {
            let names: Vec<Arc<str>> = (0..6).map(|i| Arc::from(format!("c{i}").as_str())).collect();
            let mut p = Positions::default();
            let mut marks = vec![(p.mark(), p.current().encode())];
            for (what, c, rv, sub) in ops {
                let pos = Pos { rv, sub };
                match what {
                    0 => p.join(&names[c], pos, pos, 0),
                    1 => p.remove(&names[c]),
                    2 => p.set(&names[c], pos),
                    _ => p.advance(&names[c], pos),
                }
                marks.push((p.mark(), p.current().encode()));
            }
            for (i, (m, want)) in marks.iter().enumerate() {
                prop_assert_eq!(&m.encode(), want, "mark {}", i);
            }
        }
    }

    /// A chunk starts with the positions and takes twice as many changes as there are clusters.
    #[test]
    fn chunks_grow_with_the_clusters() {
        let mut p = Positions::default();
        for i in 0..100u64 {
            p.join(&Arc::from(format!("c{i:03}").as_str()), Pos::member(i), Pos::member(i), 0);
        }
        for i in 0..1000u64 {
            p.set("c007", Pos::member(1000 + i));
        }
        let (held, _) = p.mark().held();
        assert_eq!(held, 100 + 200);
        assert!(p.copied() <= 1100, "{}", p.copied());
        assert_eq!(p.mark().encode(), p.current().encode());
    }
}
