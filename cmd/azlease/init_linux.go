//go:build linux

package main

// azlease as a container's first process (PID 1): the init of its PID
// namespace. Orphaned processes are reparented to PID 1, which must reap
// them or they stay as zombies, and the kernel delivers to PID 1 only the
// signals it handles. So azlease, when it finds itself PID 1, runs as a
// minimal init: it starts itself again as its only child (which does the
// work as usual), forwards every signal it receives to that child, reaps
// every process that exits, and exits with the child's status.

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// initChildEnv marks the child an init azlease starts, which must not act
// as init itself (it is not PID 1 anyway, unless in a namespace of its own).
const initChildEnv = "AZLEASE_INIT_CHILD"

// runAsInit runs azlease as init when it is PID 1; ok is false otherwise.
func runAsInit() (code int, ok bool) {
	if os.Getpid() != 1 || os.Getenv(initChildEnv) != "" {
		return 0, false
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs) // every signal: forwarded to the child
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	p, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), initChildEnv+"=1"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "azlease: running as PID 1, could not start itself as its child: %v\n", err)
		return exitInternal, true
	}
	exited := make(chan syscall.WaitStatus, 1)
	go reapAll(p.Pid, exited)
	for {
		select {
		case ws := <-exited:
			reapLeft()
			if ws.Signaled() {
				return exitSignalBase + int(ws.Signal()), true
			}
			return ws.ExitStatus(), true
		case s := <-sigs:
			if n, isSys := s.(syscall.Signal); isSys && n != syscall.SIGCHLD && n != syscall.SIGURG {
				_ = syscall.Kill(p.Pid, n)
			}
		}
	}
}

// reapAll reaps every process that exits, and delivers the status of child
// when it does.
func reapAll(child int, exited chan<- syscall.WaitStatus) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return // no children left: cannot happen while child lives
		case pid == child:
			exited <- ws
			return
		}
	}
}

// reapLeft reaps what has exited by the time the child did; whatever still
// runs dies with the namespace when PID 1 exits.
func reapLeft() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
