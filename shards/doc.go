// Package shards spreads the shards of a named group (queue partitions,
// tenants, key ranges, job buckets) over the replicas of a service that run
// the same code, on Azure Blob Storage leases: each shard is owned by at
// most one replica at a time, the user's work runs once per owned shard,
// and the shards follow the replicas as they come and go, and the load as
// it shifts. It is built on azlease's public API, with no coordinator and
// no leader. The mechanisms, with sequence diagrams, are in the
// repository's docs/design/shards.md.
//
// # What is guaranteed
//
// Each shard is a lock blob ("GROUP/shards/NAME") whose lease only its
// owner holds: Azure enforces one holder per shard, so replicas that
// briefly disagree about the plan cost a poll, never safety. The work of a
// shard runs under the shard's lease with azlease's guarantees for a term:
// its context ends when ownership ends, at the latest at the lease's
// validity deadline (measured from the send of the last renewal minus a
// margin), and its Err reports the deadline as soon as it passes, even
// after a pause of the whole process. Each term has a fencing epoch that
// grows from owner to owner, also across a removal and a re-addition; the
// shard's blob holds state fenced by Azure ([azlease.Term.Write]).
//
// A shard moves only by its owner: the owner ends the work's context,
// waits for the work to return (at most Options.DrainTimeout), and changes
// the lease to the lease ID the receiver announced (Change Lease). The
// lease is never free in between, and only the receiver can take it. Work
// that does not return in time is not handed over: its lease is left to
// expire. A change whose outcome is unknown leaves the shard with its
// owner, in the same term.
//
// Not guaranteed: that a former owner's work that ignores its context
// stops (fence its writes with the epoch). Replicas must use one group
// name, a static list in one order, and identities unique among the live.
//
// # How it balances
//
// Every replica reads the same listing of the group and computes the same
// plan; each acts only on its own shards and on the free shards the plan
// gives it. While no shard reports a load, shares are floor or ceil of
// K·w/W (w: Options.Weight, the replica's capacity). Once a shard reports
// one ([Shard.SetLoad]; a shard that does not counts as the mean of those
// that do), the plan balances load per capacity: free shards go to the
// least loaded; a replica above 1.10 × the group's level hands on shards
// until it is at 1.05; at most max(1, 2 % of K) shards are being handed
// on at once across the group; a shard stays a minute where it lands; a shard
// heavier than a replica's share gets a replica to itself and the group
// says to split it; with Options.Zone, each zone's load stays within 10 %
// of its capacity share. Measured figures: bench/results.md.
//
// With P the longest jittered poll interval, L the listing interval, D the
// lease duration and d the time the work takes to return, by count:
//
//	event                                  balanced within           moves
//	cold start, N replicas within 1 s      2P + 1 s after the last   each shard acquired once
//	a replica joins                        2P + d + 1 s              the minimum (6 for 32 shards 4 → 5)
//	a replica stops cleanly                d + P + 1 s               only its shards
//	a replica crashes or is partitioned    D + L + 2P + 1 s          only its shards
//	  with zones: a zone is lost           D + 2P + 1 s              only its shards
//	  with zones: one of a zone's m        D + (m + 1)P + 1 s        only its shards
//	a shard is added (AddShards)           P + 1 s                   to the least loaded
//	a shard is removed (RemoveShards)      P + d: its work stopped   none
//
// Zone rows: where replicas declare two zones or more (the lesser of a
// zone row and the crash row applies). A replica alone takes 1,000 shards
// within 5 s, at most about 500 requests a second. (On Azure, an expired
// lease may take up to a minute more to be granted again.)
//
// # Shard sets that change
//
// AddShards and RemoveShards change a running group's set (a registry
// blob written conditionally), seen by every replica within a poll.
// Replicas started with different static lists (a rolling deploy) run the
// union, each owning only shards of its own list or added ones; see New.
//
// # When storage fails
//
// A poll never waits for an acquisition, a write or a release (they run
// beside it, paced). Storage that refuses the replica for good stops it (Run
// returns an error wrapping [azlease.ErrPermanent]: a wrong key, a role
// that may list but not lease); one shard refused for good is left to the
// others and logged once at Error. Check fails when no listing has
// succeeded for a lease duration and a listing interval.
//
// # Cost
//
// Per replica: a read of the registry's properties every poll (billed as
// "other"), a listing (billed like a write) when something changed and
// every ListInterval, and a renewal of its membership and of each owned
// shard every D/3; with two zones or more, one Get Blob Properties per
// zone per poll for the group (about $1.5 a month for 3 zones). With the
// defaults (P 2 s, L 15 s, D 60 s), 256 shards on 8 replicas cost about
// $28 a month at Azure's hot-tier list prices, most of it the renewals;
// 15 s leases would cost about $76. An idle group
// makes no request that fails.
//
// # Metrics
//
// Set Options.MeterProvider for azlease.shards.owned, misplaced, acquisitions,
// moves, handons, losses, releases, balance.duration, list.failures, load,
// capacity, imbalance and hot (units and attributes: shards/metrics.go).
package shards
