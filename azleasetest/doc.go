// Package azleasetest runs an Azure Blob Storage lease service in your tests,
// so that a service that uses azlease (or Blob leases directly) can be tested
// in milliseconds, with the storage misbehaving on purpose, and checked
// against what the storage actually granted.
//
// It emulates the part of the Blob service that leases need: containers,
// block blobs with metadata and conditional writes, the Lease Blob
// operation with the states Azure documents (available, leased, expired,
// breaking, broken), and List Blobs; and append blobs ([OpAppendBlock],
// with its append-position and maximum-size conditions and its limit of
// 50,000 blocks) with ranged reads, for logs that many writers append to
// without conflicts. It follows Azure's documentation where
// Azurite differs; azlease's conformance tests run one table of cases
// against both.
//
// List Blobs ([OpListBlobs]) lists flat: prefix, marker and maxresults
// (default and most 5,000) as Azure documents them, names in the byte order
// of their UTF-8 (Azurite orders by UTF-16), each blob with its properties
// (the lease state in effect at the request's instant on the server's
// clock: an expired lease lists as expired, a breaking lease whose period
// passed as broken) and, with include=metadata, its metadata. Markers are
// opaque, as Azure's are. A delimiter (hierarchical listing) and startFrom
// are refused with 400 UnsupportedQueryParameter; the other include values
// are accepted and add nothing, since the emulator keeps no snapshots,
// versions, deleted blobs, tags, copies or uncommitted blocks.
//
// # In a test
//
// [NewServer] starts a server for one test; [Server.Client] returns an
// ordinary azblob *container.Client for it, whose requests are handled in
// process (no sockets). Give each simulated machine its own name: faults
// can then target it, and the server remembers which machine each lease was
// granted to.
//
// Run the test inside testing/synctest. The server's clock is then the
// bubble's fake clock: a 15 s lease expires as soon as every goroutine is
// waiting, so a test of a crash and a takeover, which takes tens of seconds
// against Azurite, takes milliseconds, and its timings are exact. The
// example of [NewServer] is such a test in full: three Electors, the
// leader's machine cut off ([Server.Partition]), and [Server.CheckExclusive]
// over the intervals a [Recorder] saw, registered with t.Cleanup first so
// that it runs after every replica stopped. TestExampleLeaderFailover
// (which also measures the takeover) and TestExampleMigrationOnce (DoOnce
// across five replicas while answers are lost and 503s fly) in this
// package's example_test.go run as part of its tests, in milliseconds.
//
// # Faults
//
// The server misbehaves on request, as Azure and the network in front of it
// do:
//
//   - [Server.Partition] cuts one machine off (or every machine): its
//     requests hang until it gives up ([Blackhole]) or fail at once with a
//     connection error ([Refuse]); [Server.Heal] ends it.
//   - [Server.FailRequests] answers a share of requests 500 or 503 without
//     applying them.
//   - [Server.LoseResponses] applies a share of a machine's requests and
//     loses the answer, so it cannot know whether they took effect.
//   - [Server.ApplyLate] holds a share of a machine's requests until it gave
//     up on them, and applies them later: an old renewal or release that
//     arrives after its sender moved on.
//   - [Server.Slow] delays every request of a machine.
//   - [Server.Outage] answers 503 to everything until [Server.Restore].
//   - [Server.SetClockRate] runs the server's clock faster or slower than the
//     machines' clocks, so leases expire early or late by their reckoning.
//   - [Server.Break] breaks a lease at once, as an operator does.
//
// [Server.ClearFaults] ends them all. For anything else, [Server.SetFaults]
// installs a [FaultFunc] that chooses a [Fault] for each request.
//
// # Checking exclusion
//
// [Server.History] is the server's truth: every interval during which it
// held a lease on a blob, for which lease ID, granted to which machine.
// Record the intervals during which your code believed it held a lease (or
// did the work the lease guards) with a [Recorder], and [Server.CheckExclusive]
// fails the test if one of them lies outside every lease granted to its
// machine, or two machines' intervals overlap: "never two leaders", checked
// for your own service. [CheckIntervals] does the same without a test.
//
// # Over HTTP
//
// A [Server] is an [http.Handler]. [Server.Listen] serves it on a loopback
// port for tests that start other processes, and the `azlease emulator`
// command serves one for anyone (port 10000 by default, as Azurite). Its
// account is Azurite's well-known development account ([Account],
// [AccountKey]), so a connection string written for Azurite works
// ([Endpoint.ConnectionString] gives one). As Azure does, it refuses a
// request for another account, or whose Shared Key signature does not
// verify, with 403 AuthenticationFailed, so a wrong key in a configuration
// fails in tests too; [Options.AllowAnyKey] turns the check off. SAS tokens
// are accepted without verification. Over HTTP, requests carry no machine
// name: faults for "" apply to them, and grants have no Holder.
package azleasetest
