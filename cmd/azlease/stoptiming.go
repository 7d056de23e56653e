package main

// When CMD is stopped, relative to the lease's validity deadline, and which
// flag combinations can keep the promise that CMD's whole process group has
// received SIGKILL before the lease can pass to another holder.
//
// A lease granted or renewed by a request sent at s is trusted until
// D = s + lease-duration − 5 % (the library's safety margin); Azure holds it
// until at least s + lease-duration. The guardian process (child_unix.go)
// knows D as a CLOCK_MONOTONIC instant and, unless a renewal moves D on,
// sends CMD's group SIGTERM at D − kill-after − killMargin and SIGKILL at
// D − killMargin. A stop that starts earlier (the lease lost, a signal
// forwarded from azlease) sends SIGKILL kill-after later, and never later
// than D − killMargin either. So with any flags, CMD's group is killed at
// least killMargin + 5 % of the lease before the lease can pass on, whether
// azlease is running, paused or dead.
//
// Renewals are sent every lease-duration/3. For a single slow renewal not to
// stop a healthy command, a renewal that is due must have time for one
// attempt that times out (3 s) and a retry (renewRoom) before the SIGTERM.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/azlease/azlease"
)

// killMargin is how long before the lease's validity deadline CMD's group
// gets SIGKILL at the latest: time for the signal to land and the processes
// to die, on a busy machine.
const killMargin = time.Second

// attemptTimeout is the library's default bound on one request
// (LeaseOptions.AttemptTimeout), which the command does not change.
const attemptTimeout = 3 * time.Second

// renewRoom is the time a due renewal gets before SIGTERM: one attempt that
// times out and one more second for its retry.
const renewRoom = attemptTimeout + time.Second

// stopTiming says when the guardian stops CMD. Instants are CLOCK_MONOTONIC
// nanoseconds; deadline is the lease's validity deadline.
type stopTiming struct {
	killAfter time.Duration // --kill-after: from SIGTERM to SIGKILL
	margin    time.Duration // killMargin
}

// termAt is when SIGTERM goes to CMD's group if no renewal moved the
// deadline on.
func (s stopTiming) termAt(deadline int64) int64 {
	return deadline - int64(s.killAfter) - int64(s.margin)
}

// killAt is when SIGKILL goes to CMD's group at the latest.
func (s stopTiming) killAt(deadline int64) int64 { return deadline - int64(s.margin) }

// killAfterStop is when SIGKILL goes after a stop that begins at now:
// kill-after later, and never after killAt.
func (s stopTiming) killAfterStop(now, deadline int64) int64 {
	return min(now+int64(s.killAfter), s.killAt(deadline))
}

// stopSchedule is the arithmetic of the docs' stop table for one set of flags,
// counted from the send of the last successful renewal.
type stopSchedule struct {
	validity   time.Duration // to the validity deadline D
	renewDue   time.Duration // when the next renewal is sent (at the latest)
	term, kill time.Duration // SIGTERM and SIGKILL if no renewal succeeds
	leaseEnds  time.Duration // Azure's lease ends (at the earliest)
	slack      time.Duration // from the renewal's due time to SIGTERM
}

func scheduleFor(lease, killAfter time.Duration) stopSchedule {
	validity := lease - lease/20
	s := stopSchedule{
		validity: validity, renewDue: lease / 3,
		term: validity - killAfter - killMargin, kill: validity - killMargin, leaseEnds: lease,
	}
	s.slack = s.term - s.renewDue
	return s
}

// maxKillAfter is the longest --kill-after a lease duration allows.
func maxKillAfter(lease time.Duration) time.Duration {
	return (lease - lease/20 - killMargin - lease/3 - renewRoom).Truncate(250 * time.Millisecond)
}

// checkStopTiming rejects flags that cannot keep the promise, naming them.
func checkStopTiming(lease, killAfter time.Duration) error {
	if killAfter < 0 {
		return exitf(exitUsage, "invalid --kill-after %v: must not be negative", killAfter)
	}
	if m := maxKillAfter(lease); killAfter > m {
		return exitf(exitUsage, "invalid --kill-after %v with --lease-duration %v: at most %v, so that a renewal that is due has %v (one attempt and a retry) before SIGTERM and the command is killed before the lease can pass on (lease-duration − 5%% − 1s − lease-duration/3 − %v); use a longer --lease-duration for a longer --kill-after",
			killAfter, lease, m, renewRoom, renewRoom)
	}
	return nil
}

// checkLeaseDuration is the library's rule for the lease duration, named as
// the flag.
func checkLeaseDuration(d time.Duration) error {
	if d < azlease.MinDuration || d > azlease.MaxDuration || d%time.Second != 0 {
		return exitf(exitUsage, "invalid --lease-duration %v: whole seconds from 15s to 60s", d)
	}
	return nil
}

// stopTable is the table the docs show (main.go, docs/command.md): for some lease
// durations and kill-after values, when SIGTERM and SIGKILL land after the
// last renewal, and how long a standby waits after a crash.
func stopTable() string {
	out := "  lease  kill-after  renew every  SIGTERM  SIGKILL  lease ends  standby takes over (crash)\n"
	for _, r := range []struct{ lease, kill time.Duration }{
		{15 * time.Second, 0}, {15 * time.Second, 3 * time.Second},
		{30 * time.Second, 10 * time.Second}, {60 * time.Second, 30 * time.Second},
	} {
		s := scheduleFor(r.lease, r.kill)
		out += fmt.Sprintf("  %5s  %10s  %11s  %7s  %7s  %10s  %s–%s\n",
			secs(r.lease), secs(r.kill), secs(s.renewDue), secs(s.term), secs(s.kill), secs(s.leaseEnds),
			secs(r.lease), secs(r.lease+5*time.Second*6/5))
	}
	return out
}

// secs prints a duration in seconds: "13.25s", "60s".
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s" }
