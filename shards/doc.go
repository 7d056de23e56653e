// Package shards spreads the K shards of a named group (queue partitions,
// tenants, key ranges, job buckets) over the N replicas of a service that
// run the same code, on Azure Blob Storage leases: each shard is owned by at
// most one replica at a time, the user's work runs once per owned shard,
// and the shards are spread again when replicas come and go. It is built on
// azlease's public API only.
//
// # What is guaranteed
//
// Each shard is a lock blob ("GROUP/shards/NAME") whose lease only its owner
// holds: Azure enforces one holder per shard, so replicas that briefly
// disagree about the plan cost a poll, never safety. The work of a shard
// runs under the shard's lease with azlease's guarantees for a term: its
// context ends when ownership ends, at the latest at the lease's validity
// deadline, measured from the send of the last renewal minus a margin, and
// its Err reports the deadline as soon as it passes, even after a pause of
// the whole process (the clock-rate tolerance and the limits under pauses
// are those of package azlease). Each term has a fencing epoch that grows
// from owner to owner of the same shard (epochs count per shard), and the
// shard's blob holds state fenced by Azure ([azlease.Term.Write]): a
// checkpoint written through the term can never be overwritten by a former
// owner.
//
// A shard moves without a gap and without a thief: its owner ends the work's
// context, waits for the work to return (at most Options.DrainTimeout),
// marks the hand-off on the shard's blob, and changes the lease to the lease
// ID the receiver announced for that shard (Change Lease): the lease is
// never free in between, and only the receiver can take it. If the work does
// not return in time, the shard is not handed over: its lease is left to
// expire. If the receiver is gone, the lease expires and the plan gives the
// shard to someone else. If the change fails before the lease changed
// hands (the marker's write got no answer, say), the owner keeps the shard
// and its work goes on in the same term; a marker of that term applied late
// is cleared at the owner's next poll.
//
// What is not guaranteed: that the work of a former owner that ignores its
// context stops; fencing with the epoch (or writing state through the term)
// protects what it writes. Replicas must use the same group name and shard
// list, and identities that are unique among live replicas.
//
// # How it balances
//
// Every replica holds a membership lease ("GROUP/members/IDENTITY"),
// renewed by azlease's shared scheduler, whose metadata carries its weight,
// the shard list it runs (its length and a digest, which Inspect reads)
// and the lease IDs it accepts incoming shards under, as many as fit in
// Azure's 8 KiB of metadata (71 for names of 43 bytes; the rest once those
// are handed over): presence apart from ownership. Every PollInterval (2 s by default, with jitter) each replica
// lists the group (one List Blobs request per 5,000 blobs: members, lease
// states and owners together, whatever K is) and computes the same plan
// from the same facts: shares are floor or ceil of K·w/W; a shard stays
// with its owner unless the owner holds more than its share; only the
// surplus moves, from the most to the least loaded. A replica that crashed
// keeps its share until its membership expires, within a lease duration,
// as its shards' leases do. No coordinator: each replica takes the free
// shards the plan gives it, takes shards handed to it, and hands on its
// own surplus.
//
// A replica that starts waits Options.Settle (the longest jittered poll
// interval) before it takes free shards, so that replicas started together
// see each other first and each takes only its share. With P the longest
// jittered poll interval, D the lease duration and d the time the work
// takes to return when its context ends:
//
//	event                                  balanced within           moves
//	cold start, N replicas within 1 s      2P + 1 s after the last   each shard acquired once
//	a replica joins                        2P + d + 1 s              the minimum (6 for 32 shards 4 → 5)
//	a replica stops cleanly                d + P + 1 s               only its shards
//	a replica crashes or is partitioned    D + 2P + 1 s              only its shards
//
// (On Azure, a lease that expired may take up to a minute more to be granted
// again, which delays the last row.)
//
// # When storage fails
//
// A replica's poll never waits for an acquisition, its membership's join or
// writes, or the release of a lost shard: they run beside it, at most 16
// acquisitions and releases at once, so that it lists the group every poll
// whatever storage does. Storage that refuses the replica for good stops
// it: Run returns an error wrapping [azlease.ErrPermanent] (a wrong key, or
// a role that may list but not lease, such as Storage Blob Data Reader).
// Storage that refuses one shard's lease for good leaves the replica
// running and the shard to the others; the refusals are logged once at
// Error until an acquisition succeeds again. Check fails when no listing
// has succeeded for a lease duration.
//
// # Cost
//
// Per replica and hour, with P the poll interval, D the lease duration and S
// the shards it owns: 3600/P listings (one request each up to 5,000 blobs),
// and renewals of its membership and of each shard every D/3 (up to 10 %
// sooner): about 3600/P + (1 + S) × 3600/(0.95 × D/3) requests; plus five
// requests per move and three per acquisition. For 32 shards on 4 replicas
// with the defaults (P 2 s, D 15 s): 1,800 + 9 × 758 ≈ 8,600 requests per
// replica-hour. Nothing fails while the group is idle: no request is
// refused.
//
// # Metrics
//
// See metrics.go for the instruments: owned and misplaced shards, moves,
// acquisitions, losses and the time to balance.
package shards
