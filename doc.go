// Package azlease provides leader election, distributed mutexes and run-once
// initialization on Azure Blob Storage leases.
//
//   - [Elector]: many instances of a service contend for one lock blob; one
//     leads, the others stand by and take over when it stops or fails.
//   - [Mutex]: a critical section held across processes, renewed
//     automatically while held.
//   - [Semaphore]: up to n holders at once, for work that tolerates some
//     parallelism but not unbounded parallelism; n Mutexes underneath.
//   - [DoOnce]: a function that completes once across every process calling
//     it with the same key; the others wait until it is done.
//   - [Lease]: the low-level lease all three are built on.
//
// # What is guaranteed
//
// A holder trusts its lease from the instant it sent the request that Azure
// granted or renewed it, for the lease duration minus a safety margin
// ([LeaseOptions.SafetyMargin], 5 % by default), measured on the local
// monotonic clock. Azure starts the lease when it processes the request,
// never before it was sent, so the holder's trust ends before Azure's lease
// does — provided Azure's clock runs no more than LeaseDuration/(LeaseDuration −
// SafetyMargin) times as fast as the local one (5.2 % with the defaults).
// Clock offsets do not matter: azlease never compares its clock with
// Azure's or another holder's.
//
// Loss of a lease is a signal the holder cannot miss: each term has a
// context that is cancelled with a cause ([ErrLeaseLost], [ErrLeaseBroken],
// [ErrDeadlinePassed], [ErrStopped]; read it with [context.Cause]). The
// cancellation fires at the local validity deadline on its own, even when
// the renewal request hangs or the renewals are starved. More than
// that, the term's context, [Term.Valid], [Term.Err] and
// [Elector.IsLeader] check the clock whenever they are asked: they report
// the term as ended as soon as its deadline has passed, even if no azlease
// goroutine has run since (after a pause of the whole process, the holder's
// own goroutine may well run first). Every request to Azure runs under a
// deadline that ends no later than the validity deadline, with the SDK's own
// retries turned off.
//
// # Checking before acting
//
// The rule for code that acts under a lease: check the term's context
// (ctx.Err() == nil, the context azlease handed you, not one derived from
// it) or [Term.Valid] immediately before each action that others can see —
// a write, a message, a call — not once at the top of a loop. That check is
// exact up to the instant it is made. What remains is the instant between
// the check and the action: a pause there (a GC pause, a frozen VM, SIGSTOP)
// makes the action late, possibly after another holder took over. That
// window is what the fencing epoch is for.
//
// A request that azlease gave up on may still reach Azure later. azlease
// never lets such a request act on a newer term: each term has its own lease
// ID, and an ID is never proposed again while a request carrying it may
// still be on its way. A term's ID is proposed by one request only, one that
// was answered (an acquisition attempt whose answer was lost is followed by
// attempts with fresh IDs), so after a term's lease is released no late
// request can grant its ID again, and no late write of the term can land.
//
// # Fencing
//
// Each term carries a fencing [Token] whose epoch is larger than every
// earlier term's on the same lock blob. It is written into the lock blob's
// metadata under the new lease at every acquisition. Writes to the lock blob
// itself ([Lease.SetMetadata], [Lease.Write]) are checked by Azure against
// the lease ID, so a former holder cannot overwrite a newer one's state.
//
// Epochs count per lock blob. Each Elector, Mutex, Semaphore slot and
// DoOnce key has its own lock blob, and its epochs order its own terms
// only: they look alike across blobs (all start near the blob's creation
// time in milliseconds) but do not compare. When one fenced store takes
// writes from the holders of several lock blobs, fence per (lock blob,
// epoch) pair: keep the highest epoch seen for each lock name, and reject
// a write whose epoch is lower than the one kept for its own lock.
//
// Epochs are large numbers: the first term on a lock blob gets the blob's
// creation time on Azure's clock, in milliseconds since 1970, plus one;
// later terms count up from there. So if a lock blob is deleted and created
// again (storage restored, an emulator restarted, a cleanup), the new blob's
// epochs continue above the old one's, provided the old blob averaged fewer
// than 1,000 acquisitions a second and Azure's clock did not go back; and a
// holder that saw the old blob (an Elector, a Mutex) continues above the
// highest epoch it saw, even if the blob was created again within the same
// second. Not covered: a holder that never saw the old blob, when it was
// created again within the same second, or someone writing a lower epoch
// into the blob's metadata by hand.
//
// # What is not guaranteed
//
// No lease library can stop a process that is paused (a long GC pause, a
// frozen VM, SIGSTOP) between checking its lease and acting on it: the
// action happens late, possibly after another holder took over. Leases give
// mutual exclusion under the timing assumptions above; they do not give it
// against pauses. For anything that must never be done twice or out of
// order, pass [Token.Epoch] to the system you write to and have it reject
// writes with an epoch lower than the highest it has seen for the same lock
// (see [Token]). That fencing is
// what makes the lease safe for correctness rather than only for efficiency.
//
// A system suspend stops the monotonic clock on Linux, so a process resumed
// from suspend believes less time has passed than Azure does; the epoch
// protects here too. Deleting a lock blob (or its container) while it is in
// use ends its lease at once: until the holder's next renewal, two holders
// may act, and only the epoch protects. Breaking a lease (Azure's Break Lease, or
// [Lease.Break]) hands it to another holder before the old one's validity
// deadline: the old holder learns of it at its next renewal at the latest,
// and only fencing protects the gap. Azure documents that after a lease
// expires (rather than being released), a new lease may take up to a minute
// to be granted; failover after a crash can take that long.
//
// # Cost
//
// Each lease operation is one Azure "other" transaction. A leader renews
// every RenewInterval and a follower polls every PollInterval, so with the
// defaults (5 s) each instance makes about 520,000 requests a month (an
// Elector's leader lists its candidates every PollInterval besides: see
// Planned succession). Each
// term also writes the lock blob's metadata once when it begins (the
// epoch), and, for an Elector, a Mutex (or Semaphore) and DoOnce, once
// more just before its release, to record that it released cleanly
// ([Status.Released]); a bare [Lease] does not, and a hand-off is not a
// release.
//
// Every waiter looks before it acquires: a follower and a DoOnce waiter read
// the lock blob once per poll, and [Claim] lists its names once; each
// acquires only what it found free, so none makes a request that fails while
// the lock is held, and the read stands in for the one the epoch write would
// make, so a takeover costs three requests (read, acquire, write).
//
// The waiters of a [Mutex] or [Semaphore] wait in a queue (see [Mutex]) and
// cost the same whatever their number: the first in line reads the lock blob
// (a Semaphore: lists its slots, one request whatever n) every
// HeadPollInterval (200 ms: about 5.3 requests a second with its jitter),
// and all the others together make under one request a second (right
// behind the first one per 2 × PollInterval, then one per 15 × position ×
// PollInterval, and one per 150 × PollInterval from the eleventh on; the
// [Mutex] doc has the formula; and the first lists the queue every 30 s):
// 6.2 requests a second for 50 waiters with the defaults, within a minute
// of the queue's last move. Joining the queue costs three requests,
// leaving it one; a contended Unlock lists the queue, writes a hand-off
// marker and changes the lease, then reads until the next holder's term
// shows. With
// MutexOptions.Unordered each waiter reads once per PollInterval instead.
// [Mutex.TryLock] and [Semaphore.TryAcquire] look first: one request when
// the lock is held, and they never take a lock someone waits for.
// Renewals come up to 10 % early (the first after an acquisition up to
// half an interval early), so that leases taken together do not renew
// together.
//
// # Planned succession
//
// An [Elector] that stops, or yields, hands leadership straight to the
// standby it should go to, and that standby leads a fraction of a second
// after the old leader's work stopped, not a follower's poll later:
//
//   - Every running Elector publishes its candidacy in a blob of its own next
//     to the lock blob (NAME/candidates/IDENTITY): the lease ID it announces,
//     its [ElectorOptions.Priority] and Labels, whether it is ready
//     ([Elector.SetReady]), stopping or yielded recently, and when it
//     started. It writes it when it starts, when something changes, and
//     every third of its lease duration (a candidate not written for a
//     lease duration is gone: [Candidate.Gone]), and deletes it when it
//     stops. [InspectCandidates] reads them. The leader names its best
//     candidate its standby, which polls every fifth of PollInterval.
//   - A leader that stops (Stop, or a signal 'azlease lead' gets) first,
//     still leading, designates the best ready standby (two at most: not
//     stopping, not failing recently, highest priority, then the most
//     recently started, which in a rolling deploy is the new generation) in
//     its lock blob's record, and waits, at most HandOffWait, for it to
//     acknowledge at its next poll; the acknowledged standby then looks at
//     the lock blob every SuccessorPollInterval (200 ms). Then the leader
//     ends its term, waits for its work (DrainTimeout), and changes the
//     lease to an ID derived from the one the standby announced and the
//     leader's epoch (so two terms never hand the lease under one ID): the
//     lease is never free, and the standby takes it over under a fresh ID of
//     its own within its short poll. If no standby acknowledges in time, or
//     the one chosen does not take the lease over, the lease is released as
//     before.
//   - A leader yields, the same way, to a ready candidate of strictly higher
//     priority once that candidate has been there for StabilityWindow (30 s)
//     and the leader's own term has lasted Cooldown (1 min); equal
//     priorities never move leadership. A candidate whose terms ended
//     without a clean release soon after they began (the next holder records
//     it in the lock blob) is not preferred for 10 minutes, doubled for each
//     further failure within a day. A negative priority means "never lead
//     from here while another can". [Elector.Yield], [Elector.YieldTo] and
//     [RequestYield] ('azlease yield', from any process) hand leadership over
//     on request.
//
// Succession keeps every guarantee above: a term's lease ID is still
// proposed by one answered request (the successor's Change Lease from the
// hand-off's ID to a fresh one), a request applied late acts on nothing, and
// the successor's epoch is larger. What it costs: each Elector writes its
// candidacy every third of its lease duration (about 760 requests an hour
// with the defaults, as many as its polls); the leader lists the candidates
// with one List Blobs request per PollInterval and looks for a yield request
// every fifth of it, and its standby polls every fifth of it (together about
// 6,300 requests an hour more per election, for a yield and a stop's
// preparation within about a second); a designated successor polls every
// SuccessorPollInterval for a few seconds around a hand-off; a stop takes
// up to HandOffWait longer (about a second), during which the leader still
// leads. docs/design/succession.md has the figures.
// ElectorOptions.NoSuccession turns it all off.
//
// # Holding many leases
//
// A process may hold thousands of leases at once (a Mutex per partition,
// tenant or job shard). A held lease costs two timers, not a goroutine:
// when a renewal is due, it runs on the goroutine of the timer that fired,
// and no more than 32 renewals of the same container client run at once.
// One that has waited a second for its turn starts anyway, so a few
// renewals that hang do not hold the others back, up to 64 in flight (the
// connections the client keeps): a process that falls behind does not open
// ever more connections and fall further behind. Every term ends at its
// deadline whatever its renewal is doing. Renewals come up to 10 % before
// the renew interval, at random, so that leases taken together do not renew
// together. Use one container client for all of them.
//
// The clients made by [ContainerClientFromConnectionString],
// [ContainerClientWithCredential] and [ContainerClientFromSASURL] without a
// Transport in their options get one that keeps 64 idle connections per
// host, so renewals reuse connections (azcore's default keeps 10, and a
// burst of renewals beyond that opens and closes a connection each, a TLS
// handshake each on Azure). If you pass your own Transport (an
// *http.Client), or make the container client yourself, give its
// *http.Transport a MaxIdleConnsPerHost of at least 64, and MaxIdleConns at
// least as large:
//
//	tr := http.DefaultTransport.(*http.Transport).Clone()
//	tr.MaxIdleConnsPerHost, tr.MaxIdleConns = 64, 128
//	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
//
// # Metrics and tracing
//
// azlease reports OpenTelemetry metrics through the OpenTelemetry metric API
// only; it never pulls in an SDK or an exporter. Every options struct has a
// MeterProvider field: nil means the global provider (otel.GetMeterProvider),
// which records nothing until the application installs one (with
// otel.SetMeterProvider). The instruments, with their units and attributes:
//
//	azlease.request.duration      histogram  s        each attempt of an operation: azlease.operation
//	                                                  (acquire, renew, release, read, write, break, handoff,
//	                                                  list), azlease.outcome (ok, held, lost, not_found,
//	                                                  conflict, canceled, permanent, transient)
//	azlease.term.starts           counter    {term}   terms begun: azlease.role (elector, mutex, once)
//	azlease.term.ends             counter    {term}   terms ended: azlease.role, azlease.term.end_cause (stopped,
//	                                                  yielded, stalled, max_hold, paused, deadline, broken,
//	                                                  lost, canceled, other)
//	azlease.renewal.slack         histogram  s        validity left on the lease when a renewal's answer arrived
//	azlease.elector.leader        gauge      {leader} 1 while the Elector leads, else 0 (while it runs)
//	azlease.failures.consecutive  gauge      {request} an Elector's requests failed in a row (while it runs)
//	azlease.mutex.wait.duration   histogram  s        how long Mutex.Lock waited: azlease.outcome (acquired,
//	                                                  canceled, error)
//	azlease.once.calls            counter    {call}   DoOnce calls: azlease.once.outcome (ran, done_elsewhere,
//	                                                  unrecorded, failed, exhausted, too_late, canceled,
//	                                                  lost, error)
//	azlease.elector.handoffs      counter    {handoff} hand-offs of leadership an Elector began:
//	                                                  azlease.handoff.reason (stop, yield, request, priority,
//	                                                  never_lead), azlease.handoff.outcome (taken, released,
//	                                                  none: no successor acknowledged, failed)
//	azlease.elector.priority      gauge      {priority} the Elector's Priority (while it runs)
//	azlease.elector.candidates    gauge      {candidate} ready candidates other than itself at its last
//	                                                  listing as leader
//
// Each also carries azlease.lock, the lock blob's container/name, unless
// MetricsWithoutLockName is set (for processes that hold thousands of locks).
// A term is counted once when it begins and once when it ends, however it
// ends: also when the holder's own check ([Term.Valid], the term's context)
// is the first to notice that the deadline passed. Terms are those of an
// Elector, a Mutex (and so a Semaphore) and DoOnce; a bare [Lease] reports
// its requests and renewal slack, but no terms. A renewal slack near zero
// means renewals are landing just before the lease would be given up: a
// slow network, or a process starved of CPU.
//
// azlease starts no traces itself. Its requests go through the Azure SDK,
// whose HTTP pipeline records a client span per request (method, URL
// without secrets, status, request IDs) when the container client has a
// tracing provider; azotel (github.com/Azure/azure-sdk-for-go/sdk/tracing/azotel)
// connects one to an OpenTelemetry TracerProvider. azblob v1.8.1 starts no
// span for its calls, though, and the SDK records its HTTP span only under
// one, so a per-call policy must start it:
//
//	type traceCalls struct{ tracer tracing.Tracer } // azcore/tracing
//
//	func (p traceCalls) Do(req *policy.Request) (*http.Response, error) {
//		ctx, end := runtime.StartSpan(req.Raw().Context(), "azblob "+req.Raw().Method, p.tracer, nil)
//		resp, err := req.WithContext(ctx).Next()
//		end(err)
//		return resp, err
//	}
//
//	tp := azotel.NewTracingProvider(otelTracerProvider, nil)
//	cc, err := azlease.ContainerClientFromConnectionString(conn, "locks", &container.ClientOptions{
//		ClientOptions: azcore.ClientOptions{
//			TracingProvider: tp,
//			PerCallPolicies: []policy.Policy{traceCalls{tp.NewTracer("azlease", "")}},
//		},
//	})
//
// The spans are children of the span in the context passed to azlease; an
// Elector's renewals are children of the span in the context given to Start
// or Run, while its release when it stops starts a trace of its own. The
// module
// examples/metrics does both: it serves the metrics for Prometheus on
// /metrics and traces every storage call.
//
// # Testing
//
// azlease's own tests run the real azblob client against an in-process
// emulator of the Blob lease API inside testing/synctest, where a 15-second
// lease expires in microseconds, and against Azurite on the real wire. The
// emulator is the public package azleasetest, so services using azlease can
// be tested the same way: azleasetest.NewServer starts one for a test, its
// Client method returns a container client per simulated machine, named
// faults partition a machine, lose or delay its requests or fail a share of
// them, and CheckExclusive fails the test if what the machines believed
// (recorded with an azleasetest.Recorder) ever overlapped or lay outside a
// lease the server granted.
package azlease
