// Command azlease runs a program under an Azure Blob Storage lease, from the
// shell: under a distributed lock, as the elected leader with hot standbys,
// or once across every caller. It is for the jobs that are not written in
// Go: a cron job that must not run twice at once, a deployment whose
// migration must run once across twenty pods, a singleton worker in any
// language run with standbys.
//
// Install it from a clone of the repository (the module is not published
// yet, so 'go install …@latest' cannot fetch it) with
//
//	go install ./cmd/azlease
//
// or 'make build' (static binaries in dist/) and 'make image' (a container
// image, FROM scratch).
//
// # Commands
//
//	azlease lock NAME -- CMD [ARGS...]   run CMD holding the lock NAME, waiters served in the order they asked
//	                                     (--timeout D, --no-wait, -n N slots, --unordered, --head-poll D)
//	azlease lead NAME -- CMD [ARGS...]   run CMD only while this instance leads (--restart)
//	azlease once KEY -- CMD [ARGS...]    run CMD once across every caller (--max-attempts N; --per 24h:
//	                                     once per period, for cron on every host, --keep D)
//	azlease shards NAME --count K -- CMD one CMD per shard this instance owns, K shards spread over every instance
//	azlease shards-add NAME SHARD...     add shards to a running group (shards-remove removes them)
//	azlease status NAME                  holder, epoch, history, who waits in the queue, once marker (--json, -n N, --shards)
//	azlease watch NAME                   a line per change of holder or state, and of the queue, until interrupted
//	                                     (--json, -n N, --candidates)
//	azlease yield NAME                   ask the leader of NAME to hand leadership over, and wait until it has (--to ID)
//	azlease break NAME                   break the lease on NAME (--period D)
//	azlease reset-once KEY               let 'azlease once KEY' run again
//	azlease emulator                     serve a local lease emulator (--addr 127.0.0.1:10000)
//	azlease ui                           a live, read-only web page (and JSON) of every lock blob in the
//	                                     container: kinds, holders, a leader's terms, a shard grid (--addr
//	                                     127.0.0.1:8080, --prefix P, --refresh 5s); never keys, SAS tokens or lease IDs
//	azlease version                      the module version and source revision of this binary (--json)
//
// Every command that talks to storage takes the storage account from
// $AZURE_STORAGE_CONNECTION_STRING or --connection-string, --account-url
// (Microsoft Entra ID through azidentity's default credential chain) or
// --sas-url, and --container (default locks) and --log-level (default
// warn). The commands that hold or wait for a lease (lock, lead, once,
// shards) also take --identity (default HOSTNAME-PID), --lease-duration
// (default 15s) and --poll-interval, and, since they run CMD, --kill-after
// (default 3s); reset-once takes --identity and --lease-duration, yield
// --identity. A flag a command does not take is a usage error (64), never
// silently ignored; emulator and version take none of these.
// 'azlease COMMAND --help' shows a worked example for each, on one screen;
// docs/command.md has every detail. lock, lead and once also take --health-addr ADDR, which serves
// /healthz (liveness: fails when storage has been unreachable for longer
// than the lease, or the guardian died), /readyz (readiness; with
// --ready-when-leading or --ready-when-holding, only while this instance
// holds the lease and CMD runs) and /leader (the holder, epoch and since,
// as JSON).
//
// # The command under the lease
//
// CMD starts only once the lease is held. Its environment carries
// AZLEASE_NAME (the lock, election or once key), AZLEASE_IDENTITY (this
// holder) and AZLEASE_EPOCH, the fencing epoch: it grows with every
// acquisition, so a script can pass it to what it writes and have stale
// holders' writes rejected. With lock -n N, AZLEASE_SLOT says which slot is
// held, and the epoch counts per slot.
//
// # Never two commands at once
//
// CMD's whole process group has received SIGKILL before the lease can pass
// to another holder, whatever CMD does with SIGTERM, and whether azlease is
// running, paused or dead. A lease renewed by a request sent at s is
// trusted until its validity deadline D = s + lease-duration − 5 %; Azure
// keeps it until s + lease-duration at least. Unless a renewal moves D on,
// CMD's group gets SIGTERM at D − kill-after − 1 s and SIGKILL at D − 1 s.
// A stop that begins earlier (the lease lost: a renewal refused, broken by
// an operator; or SIGINT, SIGTERM or SIGHUP forwarded to CMD) sends SIGKILL
// kill-after later, and never after D − 1 s. Renewals are sent every
// lease-duration/3, so with the defaults (lease 15 s, kill-after 3 s):
//
//	lease  kill-after  renew every  SIGTERM  SIGKILL  lease ends  standby takes over (crash)
//	  15s          0s           5s   13.25s   13.25s         15s  15s–21s
//	  15s          3s           5s   10.25s   13.25s         15s  15s–21s
//	  30s         10s          10s    17.5s    27.5s         30s  30s–36s
//	  60s         30s          20s      26s      56s         60s  60s–66s
//
// (times from the send of the last successful renewal; a standby polls every
// --poll-interval, 5 s for lead, and Azure may take up to a minute more to
// grant an expired lease). --kill-after may be at most lease-duration × 0.95
// − lease-duration/3 − 5 s (4.25 s for 15 s, 13.5 s for 30 s, 32 s for
// 60 s), so that a due renewal has one attempt (3 s) and a retry before
// SIGTERM: a single slow renewal does not stop a healthy command. Other
// combinations are refused. lock and once then exit 79, and lead contends
// again and runs CMD anew in its next term.
//
// CMD runs under a small guardian process (azlease re-executed in a hidden
// mode), as the leader of a new process group. After every renewal azlease
// sends the guardian the new validity deadline as an absolute monotonic
// clock instant, and the guardian keeps the schedule above on its own, so
// even an azlease that is paused (SIGSTOP, a debugger) cannot let CMD
// outlive its lease. If azlease dies (SIGKILL, the OOM killer), the
// guardian kills CMD's group with SIGKILL at once: it learns of the death
// from its control pipe on every Unix system, and from the parent-death
// signal on Linux too. If the guardian dies, azlease kills the group, and
// on Linux CMD dies with it; if the guardian is stopped, azlease kills the
// group at D − 1 s itself. Processes that leave CMD's process group
// (setsid, daemons) are not tracked. Running a command under a lease needs
// a Unix system; on Windows, lock, lead, once and shards exit 70, and the
// other commands work. On macOS and the BSDs everything works, without the
// parent-death signal (the control pipe is the only death notice there).
//
// What no process can cover: when the whole machine, VM or cgroup is frozen
// (a VM paused, a cgroup freezer, a laptop suspended), azlease, its guardian
// and CMD stop together, and after the thaw CMD may run a moment before the
// guardian acts, after the lease passed on. The remedy is fencing: pass
// AZLEASE_EPOCH to what CMD writes and have it reject lower epochs.
//
// When CMD exits, anything it left running in its process group gets
// SIGTERM (SIGKILL after --kill-after) before the lease is released. Under
// an interactive terminal, CMD runs in the terminal's foreground, so it can
// read the terminal and Ctrl-C reaches it; suspending it (Ctrl-Z) is not
// supported.
//
// SIGINT, SIGTERM and SIGHUP sent to azlease are forwarded to CMD (SIGKILL
// follows kill-after later if CMD has not exited), and the lease is
// released after CMD exits. While azlease is still waiting for a lease, or
// if one arrives before CMD has started, they make it exit at once with
// 128+N, and CMD does not run.
//
// As a container's first process (PID 1), azlease acts as the container's
// init: it runs itself as its only child, forwards signals to it, reaps the
// orphaned processes CMD leaves, and exits with the child's status.
//
// # Exit statuses
//
//	0        success (CMD exited 0; for once, also: it was already done;
//	         for watch and ui, also: ended by SIGINT, SIGTERM or SIGHUP)
//	1–255    CMD's own status, passed through (128+N when signal N killed
//	         it; one of 64–81 reads as azlease's own: below)
//	64       usage: bad flags or arguments, no or invalid connection settings
//	69       storage unavailable: unreachable, or failing for too long
//	70       internal: the guardian process died, or another internal failure
//	75       not acquired: --no-wait found the lock held, --timeout passed;
//	         reset-once while the key runs; once --per not taken within --keep/2;
//	         yield: leadership did not move
//	77       storage refused the request: authentication (a wrong key),
//	         permission, or another permanent error
//	79       the lease was lost while CMD ran, and CMD was stopped
//	80       once: the key failed for good (the recorded error is printed)
//	81       once: CMD exited 0, but its completion is not known to be
//	         recorded (another caller may run it again, or did)
//	126      CMD was found but could not be run
//	127      CMD was not found
//	128+N    CMD was killed by signal N, or azlease was stopped by signal N
//	         before CMD ran (130 for SIGINT, 143 for SIGTERM)
//
// azlease shards runs until a signal stops it (128+N, after stopping every
// CMD and releasing its shards): a shard's CMD that exits is started again,
// and a shard whose lease is lost, that moves as its CMD starts, or whose
// renewals stall past the stop point stops that shard's CMD only (it
// never exits 79). It also exits 64 (usage), 69 (storage unreachable at
// the start), 77 (storage refused: a wrong key, or a role that may not
// lease and write blobs), and 70, 126 or 127 (a guardian died, or CMD
// cannot be run or found: no shard can run it).
//
// CMD's status passes through unchanged, so a CMD that itself exits 64–81 is
// indistinguishable by status alone from azlease's own outcomes; azlease
// prints one line on stderr, starting "azlease: ", for each of its own, and
// nothing of its own when it passes CMD's status through (warnings are
// logged as they happen at the default --log-level warn, and the guardian
// says when it stops CMD because no renewal came in time). Scripts that
// must tell them apart should have CMD avoid 64–81.
//
// Errors are one line on stderr. Keys, SAS tokens and lease IDs are never
// printed or logged. Command-line arguments are visible to other users of
// the machine: give secrets through $AZURE_STORAGE_CONNECTION_STRING, which
// may also hold a SAS ("BlobEndpoint=https://…;SharedAccessSignature=sv=…").
package main

import "os"

func main() {
	if code, ok := runAsInit(); ok {
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == guardianArg {
		os.Exit(guardianMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
