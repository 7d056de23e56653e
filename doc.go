// Package azlease provides leader election, distributed mutexes and run-once
// on Azure Blob Storage leases: nothing to run besides a storage account.
//
//   - [Elector]: many instances of a service contend for one lock blob; one
//     leads, the others stand by and take over when it stops or fails. A
//     planned stop or yield hands leadership straight to a ready standby.
//   - [Mutex]: a critical section held across processes, renewed while held;
//     waiters are served in the order they asked. [Semaphore]: up to n
//     holders at once. [Claim]: the first free one of several locks.
//   - [DoOnce]: a function that completes once across every process calling
//     it with the same key (a migration per release, a job per tick); the
//     others wait until it is done.
//   - [Lease]: the low-level lease all of them are built on.
//   - [Inspect], [InspectPrefix], [InspectCandidates], [InspectOnce]: read
//     who holds what, with read access only. Package shards spreads shards
//     over replicas; package azleasetest tests services that use azlease.
//
// Connect with [ContainerClientFromConnectionString],
// [ContainerClientWithCredential] or [ContainerClientFromSASURL]. Every
// options struct is passed by pointer; nil means the defaults.
//
// # What is guaranteed
//
//   - A holder trusts its lease from the instant it sent the request Azure
//     granted, for the lease duration minus a safety margin (5 %), on the
//     local monotonic clock: its trust ends before Azure's lease, as long as
//     Azure's clock runs no more than 5.2 % faster. Clock offsets never
//     matter.
//   - Every request has a deadline no later than that validity deadline, with
//     the SDK's retries off; transient failures are retried within the time
//     left, definitive answers (lease lost, broken) end the term at once, and
//     refusals (a wrong key, a missing role) are reported at once, loudly.
//   - Loss is a signal the holder cannot miss: the term's context is
//     cancelled with a cause at the validity deadline by itself, and
//     [Term.Valid], the term's context and [Elector.IsLeader] check the clock
//     whenever asked, even after a pause of the whole process.
//   - A request applied late, after azlease gave up on it, never acts on a
//     newer term: every term has its own lease ID, never proposed again while
//     a request carrying it may be on its way.
//   - Every term carries a fencing [Token] whose epoch is larger than every
//     earlier term's on the same lock blob (epochs of different lock blobs do
//     not compare).
//   - Every goroutine azlease starts has an owner that waits for it.
//
// Not guaranteed: no lease stops a process that pauses between checking its
// lease and acting on it. Check the term's context or [Term.Valid] right
// before each action that others can see, and pass [Token.Epoch] to what you
// write, which rejects lower epochs for the same lock: that is what makes the
// lease safe for correctness. A lease broken by an operator, a lock blob
// deleted in use, or a system suspend are covered by the epoch alone.
//
// # What it costs
//
// Each lease operation is one "other" transaction: with the defaults a leader
// renews and a follower polls every 5 s (720 to 760 requests an hour each),
// and each Elector publishes its candidacy every 5 s (as many again); an
// Elector's leader and its standby also look every second, for a yield
// within a second (about 7,000 requests an hour more). The waiters of a fair
// lock look often while the hold they wait behind is young, rarely once it is
// old: behind a 10-minute hold, 1 waiter makes 0.7 requests a second on
// average and 50 make 3.5 in all (0.55 and 1.2 in the hold's last minute). A held
// lease costs two timers, not a goroutine: a process can hold tens of
// thousands on one container client. The README's Costs and
// bench/results.md have the measured figures.
//
// # Where to read more
//
// The design notes in the repository's docs/design explain the mechanisms,
// with sequence diagrams: terms-and-fencing.md (validity, requests applied
// late, epochs, how a term begins and ends), succession.md (candidates,
// hand-overs, priority, yields), fair-locks.md (the queue, hand-off and
// unsticking), run-once.md (DoOnce's marker and settling), once-per-tick.md
// (scheduled jobs, Retention), many-leases.md (the renewal scheduler and
// connections) and shards.md (package shards: balancing by load, shard
// sets that change, the beacon, cold start with Lease.HoldAfter, cost).
// The README covers the command, operating (logs, health, metrics and
// tracing) and costs.
//
// # Metrics, logs and testing
//
// Every options struct takes a Logger (silent when nil; keys, SAS tokens and
// lease IDs are never logged) and a MeterProvider for OpenTelemetry metrics
// (nil: the global provider, which records nothing until one is installed);
// the README lists the instruments, and how to trace storage calls.
// Package azleasetest serves an in-process emulator of the Blob lease API,
// with faults per simulated machine and a checker that fails a test when
// what the machines believed ever overlapped or lay outside a granted lease.
package azlease
