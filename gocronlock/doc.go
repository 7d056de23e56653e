// Package gocronlock runs the jobs of go-co-op/gocron v2 schedulers in
// several replicas of a service on azlease, in one of two ways:
//
//   - [Elector]: gocron's distributed Elector backed by an [azlease.Elector].
//     The leader runs every job; the others run none. A job that began
//     while leading is not stopped when leadership ends: fence what it
//     writes with the term's token ([azlease.Elector.Term]).
//   - [Locker]: gocron's distributed Locker, which runs each job once per
//     tick across the replicas, whichever fires first, however late the
//     others fire (up to half the period either side of the tick). A plain
//     lock (lock, run, unlock) does not: replicas whose schedules are a
//     few seconds apart (a rollout, clock skew) each find the lock free
//     after the previous one's run ended, and a fast job runs on every
//     replica (gocron issue #841).
//
// The Locker keys each run by the job's name and its tick, the scheduled
// time nearest to when the job fired ([Locker.Tick]): Options.Offset plus a
// multiple of Options.Period, by the replica's own clock. Replicas agree on
// the tick as long as each fires within Period/2 of it by its own clock: a
// DurationJob started with [Locker.StartAt], or a CronJob whose times are
// Offset plus multiples of Period, fires on its ticks whatever the skew
// between the replicas' clocks; what must stay under Period/2 is how far a
// replica's fire lands from the tick (a start time not aligned to the
// ticks, a delay before gocron calls Lock). Past Period/2 a run is told
// another tick and the job may run twice; the Locker logs a warning for a
// job that fires within Period/8 of a midpoint between two ticks.
//
// Each tick is an [azlease.DoOnce] key, with DoOnce's guarantees: the first
// replica to take the tick runs the job; a replica that fires later finds
// it done and skips the job (Lock returns an error wrapping [ErrTickDone]);
// one that fires while it runs waits, and skips it once it is done, or
// gives up half a period after the tick ([ErrTickBusy]: gocron schedules a
// job's next run only when Lock returns, so waiting longer would miss the
// next tick). If the runner dies (or loses its lease) mid-run, a waiting
// replica runs the tick again when the lease expires, as DoOnce does, up to
// MaxAttempts attempts in all (3), if that is within the half period (the
// lease's 15 s and a poll: periods of about 40 s and more); otherwise the
// tick is lost and the next one runs as usual. A run whose job returned an
// error counts as the tick's run, as gocron counts it: gocron does not run
// a failed job again until its next tick, and neither do the other
// replicas. The tick's records are deleted after Options.Retention, by the
// replicas as they run ticks.
//
// Each run costs about 8 requests to storage (look, acquire, mark running,
// mark done, release; a listing and up to 4 deletes of old ticks), and a
// replica that finds the tick done one request. See
// docs/design/once-per-tick.md in the azlease repository for the mechanism.
package gocronlock
