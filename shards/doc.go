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
// protects what it writes. Replicas must use the same group name,
// replicas of one static list the same order, and identities that are
// unique among live replicas.
//
// # How it balances
//
// Every replica holds a membership lease ("GROUP/members/IDENTITY") whose
// metadata carries its capacity (Options.Weight), zone, static list (its
// length and digest), the smoothed loads of the shards it owns and the
// lease IDs it accepts incoming shards under, within Azure's 8 KiB of
// metadata at MaxShards names of the longest length. Every replica lists
// the group (one List Blobs request per 5,000 blobs) and computes the same
// plan from the same listing; each acts only on its own shards and on the
// free shards the plan gives it. No coordinator, no leader.
//
// While no shard reports a load, the plan balances counts: shares are
// floor or ceil of K·w/W; a shard stays with its owner unless the owner
// holds more than its share; only the surplus moves. Once a shard reports
// one ([Shard.SetLoad]; a shard that does not counts as the mean of those
// that do), the plan balances load per capacity: free shards go to the
// least loaded; a replica above 1.10 × the group's level hands on the
// shards that best bring it down (to 1.05), to replicas below the level;
// a shard that moved stays a minute (DefaultCooldown); at most max(1, 2 %
// of K) shards are handed on per round across the group; a shard whose
// load alone exceeds a replica's share gets a replica to itself, and the
// group says so (Inspect, a metric, an Info log once: split it). With
// zones, each zone's load stays within 10 % of its share of the capacity.
// Measured (bench/results.md): Zipf(0.8) loads over 256 shards and 8
// replicas stay within 1.09 of the mean at p99, ±20 % noise moves nothing
// back and forth, and a shard whose load jumps tenfold is back within the
// band in about 10 s.
//
// A replica that starts waits Options.Settle (the longest jittered poll
// interval) before it takes free shards, so that replicas started together
// see each other first and each takes only its share. A replica alone
// takes 1,000 shards within 5 s, never sending more than about 500 requests
// a second. With P the longest jittered poll interval, L the listing
// interval, D the lease duration and d the time the work takes to return
// when its context ends, by count:
//
//	event                                  balanced within           moves
//	cold start, N replicas within 1 s      2P + 1 s after the last   each shard acquired once
//	a replica joins                        2P + d + 1 s              the minimum (6 for 32 shards 4 → 5)
//	a replica stops cleanly                d + P + 1 s               only its shards
//	a replica crashes or is partitioned    D + L + 2P + 1 s          only its shards
//	a shard is added (AddShards)           P + 1 s                   to the least loaded
//	a shard is removed (RemoveShards)      P + d: its work stopped   none
//
// By load, moves go at most max(1, 2 % of K) per round (two polls and the
// drain). (On Azure, a lease that expired may take up to a minute more to
// be granted again, which delays the crash row.)
//
// # Shard sets that change
//
// AddShards and RemoveShards change a running group's set (its registry
// blob, "GROUP/shardset"): every replica sees the change within a poll.
// Replicas started with different static lists (a rolling deploy) run the
// union, each owning only shards of its own list or added ones; see New.
// A shard moving is handed over as always: never owned twice.
//
// # When storage fails
//
// A replica's poll never waits for an acquisition, its membership's join or
// writes, or the release of a lost shard: they run beside it (acquisitions
// from a queue, paced), so that it looks at the group every poll whatever
// storage does. Storage that refuses the replica for good stops it: Run
// returns an error wrapping [azlease.ErrPermanent] (a wrong key, or a role
// that may list but not lease, such as Storage Blob Data Reader). Storage
// that refuses one shard's lease for good leaves the replica running and
// the shard to the others; the refusals are logged once at Error until an
// acquisition succeeds again. Check fails when no listing has succeeded
// for a lease duration and a listing interval.
//
// # Cost
//
// Listing is billed like a write, ten times a lease operation. So a replica
// reads the group's registry blob's properties every poll (billed as
// "other") and lists the group only when the registry says something
// changed (a replica joined or left, the set changed, a load changed by
// 3 %), while anything moves, and every ListInterval (15 s). Per replica
// and hour, with P the poll interval, L the listing interval, D the lease
// duration and S the shards it owns, while the group is settled: 3600/L
// listings, 3600/P − 3600/L reads of the registry's properties, and
// renewals of its membership and of each shard every D/3 (up to 10 %
// sooner), (1 + S) × 3600/(0.95 × D/3); plus a write of its membership at
// most every 10 s while loads change, five requests per move and two or
// three per acquisition. With the defaults (P 2 s, L 15 s, D 60 s), 256
// shards on 8 replicas cost about $28 a month at Azure's hot-tier list
// prices, most of it the renewals (bench/results.md has the table). Nothing
// fails while the group is idle: no request is refused.
//
// # Metrics
//
// See metrics.go for the instruments: owned and misplaced shards, moves and
// hand-ons by reason, acquisitions, losses, the time to balance, this
// replica's load and capacity, the group's imbalance and hot shards.
package shards
