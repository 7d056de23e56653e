// Package ehbalance is azlease's own implementation of the partition load
// balancer of the Event Hubs processors, run beside package shards in the
// side-by-side benchmark (internal/shardbench) on the same emulator and the
// same azblob client. It was written from the processors' documentation and
// from reading the public source of the Go processor (azeventhubs
// processor.go, processor_load_balancer.go and checkpoints/blob_store.go),
// not ported: it keeps the algorithm, its defaults and its blob protocol,
// and nothing else of the SDK (no Event Hubs, no checkpoints).
//
// # The algorithm
//
// One ownership blob per partition (the blob named prefix + partition),
// whose metadata "ownerid" names its owner; no leases. Every update interval (10 s by
// default, each wait drawn from 0.8 to 1.3 times it, the first cycle at
// once) a processor:
//
//  1. lists the ownership blobs (one List Blobs request per 5,000, with
//     metadata: owner, ETag and Last-Modified of each);
//  2. counts a record as free if the owner wrote it longer than the
//     expiration duration (60 s by default) ago — the server's Last-Modified
//     against the processor's own clock, as the SDK does — or if its owner
//     is "" (relinquished); partitions without a blob are free too;
//  3. counts as owners the distinct owners of the live records, plus
//     itself (there is no other presence): with K partitions and O owners,
//     minRequired = K / O, and the most an owner may keep is minRequired,
//     plus one when the division leaves a remainder and this processor
//     already holds minRequired; owners above that are "above max";
//  4. if it holds fewer than that (or exactly one fewer when a remainder
//     exists, and something is free or above max), claims more: the
//     balanced strategy (the Go and JavaScript default) one partition per
//     cycle, a uniformly random free one, else one of an owner above max;
//     the greedy strategy as many as it lacks at once, the free ones first,
//     then stolen, each group taken as the SDK takes it (a random order of
//     the first n candidates in list order, rand.Perm(n));
//  5. writes every record it keeps or claims: SetMetadata(ownerid=self,
//     If-Match: the ETag it listed), or, for a partition that never had a
//     blob, an empty Upload with If-None-Match: *. A write refused for its
//     condition (412 ConditionNotMet, 409 BlobAlreadyExists) means another
//     processor got there first: the partition is dropped, silently. That
//     write is also the renewal of the records it holds.
//
// What a processor believes it owns is exactly what its last cycle wrote:
// a partition stolen from it stays believed (and processed) until its next
// cycle, which no longer finds it listed under its name. (The Go processor
// relies on the Event Hubs service to end the old owner's receiver when
// the thief opens its own; a shard with no such service-side epoch learns
// it at the next cycle, which is the overlap the benchmark counts.) On a
// clean stop it ends its work and relinquishes what it holds: each record
// rewritten with ownerid "" under the ETag of its last write.
//
// # Where it differs from the SDK, and why
//
//   - The Go SDK collects the listed records in a map (ListOwnership,
//     keyed by blob name) and groups them by owner in another, so the
//     order in which step 4 meets free records, and the order of the
//     owners above max, change from one listing to the next; this
//     implementation shuffles the listed records with its own seeded
//     source instead. Either way the records of one owner stay together
//     among those above max, so a greedy processor steals its n partitions
//     from the first such owner it meets, not uniformly among them.
//     Options.NameOrder keeps the listing's name order instead (as an
//     older ListOwnership returned them), for comparison with the research
//     model behind issue 20's figures (balancers-ehsim.py, with the
//     project's research notes), which meets records in a fixed order.
//   - A cycle whose listing or one of whose writes fails for another
//     reason changes nothing the processor believes, and the next cycle
//     tries again; the Go processor's Run returns that error instead, which
//     stops the processor. (The benchmark injects no such failure.)
//   - The ETag from the listing is sent in If-Match with its quotes: Azure
//     lists ETags without the quotes its headers carry, and the emulator
//     compares If-Match literally with the quoted form. (The SDK sends the
//     listed value as it is; that Azure accepts it is inferred from the
//     SDK's use, not verified here.)
//
// The .NET processor defaults to greedy, a 30 s update interval and a 2 min
// expiration, and its documentation describes its greedy strategy as one
// claim at a time with cycles run back to back until balanced; this
// package implements the Go processor's strategies, with the Go defaults.
package ehbalance
