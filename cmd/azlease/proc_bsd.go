//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

// Without Linux's parent-death signal, the guardian learns that azlease died
// from the control pipe's end-of-file alone.
func guardianAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// commandAttr: CMD leads a new process group (in the terminal's foreground
// if fg). If the guardian dies, azlease kills the group.
func commandAttr(fg bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: 0}
}

// waitExited returns when CMD has exited, and reaps it (there is no portable
// way to wait without reaping).
func waitExited(cmd *exec.Cmd) { _ = cmd.Wait() }

// groupLeftovers reports whether process group pgid still has a member.
// Its leader has been reaped, so the number could in principle be reused by
// a new group; pids are not reused that fast in practice.
func groupLeftovers(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
